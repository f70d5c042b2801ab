"""CPU lowerings: quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

Kernels: ``jitort.kernels.cpu.quant`` (alias ``_quant`` in generated drivers).
"""
from __future__ import annotations
