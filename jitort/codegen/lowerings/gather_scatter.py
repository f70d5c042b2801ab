"""CPU lowerings: GatherElements, GatherND, ScatterElements, ScatterND, Scatter, OneHot.

Kernels: ``jitort.kernels.cpu.gather_scatter`` (alias ``_gs`` in generated drivers).
"""
from __future__ import annotations
