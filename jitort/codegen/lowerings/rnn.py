"""CPU lowerings: LSTM, GRU and RNN (input projection as one GEMM over all steps, then the recurrence).

Kernels: ``jitort.kernels.cpu.rnn`` (alias ``_rnn`` in generated drivers).
"""
from __future__ import annotations
