"""CPU kernels: Pad (constant, reflect, edge, wrap), Tile, DepthToSpace, SpaceToDepth, Trilu, EyeLike, Range, ConstantOfShape, CenterCropPad, ReverseSequence. Imports nothing from jitort."""
