"""CPU lowerings: ConvTranspose (1-D, 2-D, 3-D; groups, strides, dilations, pads, output_padding).

Kernels: ``jitort.kernels.cpu.conv_transpose`` (alias ``_convt`` in generated drivers).
"""
from __future__ import annotations
