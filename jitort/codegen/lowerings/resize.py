"""CPU lowerings: Resize and Upsample (nearest, linear, cubic; every coordinate transformation), GridSample, AffineGrid.

Kernels: ``jitort.kernels.cpu.resize`` (alias ``_resize`` in generated drivers).
"""
from __future__ import annotations
