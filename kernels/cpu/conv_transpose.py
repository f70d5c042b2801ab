"""CPU kernels: ConvTranspose (1-D, 2-D, 3-D; groups, strides, dilations, pads, output_padding). Imports nothing from jitort."""
