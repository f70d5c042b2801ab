"""A stand-in for the cuBLAS binding jitort calls (kernels/cuda/blas.py), for the simulator.

cuBLAS cannot run on the simulator, so :class:`StandInCublas` does what cuBLAS's documentation
says each GEMM routine does, over the memory the addresses name (the simulator's device arrays
are host memory); :class:`Listed` wraps a binding (the stand-in, or CuPy's on a GPU) and lists
its calls. tests/cuda/conftest.py's ``cublas`` fixture installs them."""
import ctypes

import numpy as np

from jitort.kernels.cuda import blas


class StandInCublas:
    """cuBLAS's GEMM routines as documented, on host memory."""

    def create(self):
        return 7

    def setMathMode(self, handle, mode):
        pass

    def setStream(self, handle, stream):
        assert handle == 7

    @staticmethod
    def _matrix(dt, addr, rows, cols, ld):
        """The column-major (rows, cols) matrix of leading dimension ``ld`` at ``addr``."""
        if ld < max(1, rows):
            raise ValueError(f"CUBLAS_STATUS_INVALID_VALUE: ld {ld} < rows {rows}")
        item = np.dtype(dt).itemsize
        span = (cols - 1) * ld + rows
        flat = np.ctypeslib.as_array((ctypes.c_char * (span * item)).from_address(addr))
        return np.lib.stride_tricks.as_strided(flat.view(dt), (rows, cols), (item, ld * item))

    def _gemm(self, dt, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count):
        item = np.dtype(dt).itemsize
        ct = np.float32 if dt == np.float16 else dt  # the Ex routines' float32 compute
        for z in range(count):
            am = self._matrix(dt, a + z * sa * item, *((m, k) if ta == blas.OP_N else (k, m)), lda)
            bm = self._matrix(dt, b + z * sb * item, *((k, n) if tb == blas.OP_N else (n, k)), ldb)
            cm = self._matrix(dt, c + z * sc * item, m, n, ldc)
            am, bm = am.astype(ct), bm.astype(ct)
            prod = alpha * ((am if ta == blas.OP_N else am.T) @ (bm if tb == blas.OP_N else bm.T))
            cm[...] = prod if beta == 0 else prod + beta * cm

    def sgemm(self, h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        self._gemm(np.float32, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1)

    def dgemm(self, h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        self._gemm(np.float64, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1)

    def sgemmStridedBatched(self, h, *args):
        self._gemm(np.float32, *args)

    def dgemmStridedBatched(self, h, *args):
        self._gemm(np.float64, *args)

    @staticmethod
    def _scalar(addr):
        return float(np.ctypeslib.as_array((ctypes.c_float * 1).from_address(addr))[0])

    def gemmEx(self, h, ta, tb, m, n, k, pa, a, at, lda, b, bt, ldb, pb, c, ct, ldc, comp, algo):
        self.gemmStridedBatchedEx(h, ta, tb, m, n, k, pa, a, at, lda, 0, b, bt, ldb, 0, pb, c, ct,
                                  ldc, 0, 1, comp, algo)

    def gemmStridedBatchedEx(self, h, ta, tb, m, n, k, pa, a, at, lda, sa, b, bt, ldb, sb, pb,
                             c, ct, ldc, sc, count, comp, algo):
        assert (at, bt, ct, comp) == (blas.R_16F, blas.R_16F, blas.R_16F, blas.COMPUTE_32F)
        self._gemm(np.float16, ta, tb, m, n, k, self._scalar(pa), a, lda, sa, b, ldb, sb,
                   self._scalar(pb), c, ldc, sc, count)


class Listed:
    """A cuBLAS binding whose GEMM calls (dtype, ops, m, n, k, leading dimensions, batch
    strides, count) and math modes are listed: CuPy's on a GPU, the stand-in elsewhere."""

    def __init__(self, lib):
        self.lib, self.calls, self.modes = lib, [], []

    def create(self):
        return self.lib.create()

    def setMathMode(self, handle, mode):
        self.modes.append(mode)
        self.lib.setMathMode(handle, mode)

    def setStream(self, handle, stream):
        self.lib.setStream(handle, stream)

    def _single(self, name, h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        self.calls.append((name[0].replace("s", "f"), ta, tb, m, n, k, lda, 0, ldb, 0, ldc, 0, 1))
        getattr(self.lib, name)(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)

    def _batched(self, name, h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc,
                 count):
        self.calls.append((name[0].replace("s", "f"), ta, tb, m, n, k, lda, sa, ldb, sb, ldc, sc,
                           count))
        getattr(self.lib, name)(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc,
                                sc, count)

    def gemmEx(self, h, ta, tb, m, n, k, pa, a, at, lda, b, bt, ldb, pb, c, ct, ldc, *rest):
        self.calls.append(("e", ta, tb, m, n, k, lda, 0, ldb, 0, ldc, 0, 1))
        self.lib.gemmEx(h, ta, tb, m, n, k, pa, a, at, lda, b, bt, ldb, pb, c, ct, ldc, *rest)

    def gemmStridedBatchedEx(self, h, ta, tb, m, n, k, pa, a, at, lda, sa, b, bt, ldb, sb, pb,
                             c, ct, ldc, sc, count, *rest):
        self.calls.append(("e", ta, tb, m, n, k, lda, sa, ldb, sb, ldc, sc, count))
        self.lib.gemmStridedBatchedEx(h, ta, tb, m, n, k, pa, a, at, lda, sa, b, bt, ldb, sb, pb,
                                      c, ct, ldc, sc, count, *rest)

    def sgemm(self, *args):
        self._single("sgemm", *args)

    def dgemm(self, *args):
        self._single("dgemm", *args)

    def sgemmStridedBatched(self, *args):
        self._batched("sgemmStridedBatched", *args)

    def dgemmStridedBatched(self, *args):
        self._batched("dgemmStridedBatched", *args)
