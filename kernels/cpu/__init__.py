"""CPU kernels (Numba njit)."""
