"""CPU lowerings: the remaining numeric ops (Det, losses, BitCast, TensorScatter, DeformConv).

Kernels: ``jitort.kernels.cpu.misc`` (alias ``_misc`` in generated drivers).
"""
from __future__ import annotations
