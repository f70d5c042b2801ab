"""Kernels of the remaining numeric ops (Det, losses, BitCast, TensorScatter, DeformConv)."""
