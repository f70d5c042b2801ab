"""CPU kernels: Resize and Upsample (nearest, linear, cubic; every coordinate transformation), GridSample, AffineGrid. Imports nothing from jitort."""
