"""CUDA kernels (numba-cuda)."""
