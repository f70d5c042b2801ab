"""CPU lowerings: Pad (constant, reflect, edge, wrap), Tile, DepthToSpace, SpaceToDepth, Trilu, EyeLike, Range, ConstantOfShape, CenterCropPad, ReverseSequence.

Kernels: ``jitort.kernels.cpu.shape_ops`` (alias ``_shape_ops`` in generated drivers).
"""
from __future__ import annotations
