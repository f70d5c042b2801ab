"""CPU lowerings: scans and selections: CumSum, CumProd, ArgMax, ArgMin, TopK, Hardmax.

Kernels: ``jitort.kernels.cpu.scan`` (alias ``_scan`` in generated drivers).
"""
from __future__ import annotations
