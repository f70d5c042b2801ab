"""A stand-in for the cuDNN binding jitort calls (kernels/cuda/dnn.py's ``Cudnn``), for the
simulator.

cuDNN cannot run on the simulator, so :class:`StandInCudnn` keeps descriptors as Python records
and does what cuDNN's documentation says ``cudnnConvolutionForward`` does (NCHW
cross-correlation with groups, symmetric pads, strides and dilations; ``y = alpha * conv +
beta * y``) over the memory the addresses name (the simulator's device arrays are host
memory). :class:`Listed` wraps a binding (the stand-in, or the real one on a GPU) and lists
each convolution it runs with the descriptors' contents. tests/cuda/conftest.py's ``cudnn``
fixture installs them."""
import ctypes

import numpy as np

from jitort.kernels.cuda import dnn

_DTYPES = {code: dt for dt, code in dnn.DATA.items()}
HANDLE = 11


def _array(dt, addr, shape):
    count = int(np.prod(shape))
    raw = (ctypes.c_char * (count * dt.itemsize)).from_address(addr)
    return np.ctypeslib.as_array(raw).view(dt).reshape(shape)


class StandInCudnn:
    """cuDNN's convolution calls as documented, on host memory. ``ranked``: what the
    heuristics answer, ``(algo, status, workspace bytes, math type)`` in order."""

    def __init__(self, ranked=None):
        self.ranked = list(ranked or [(1, 0, 4096, dnn.FMA_MATH)])
        self.descs: dict[int, tuple] = {}
        self._next = 100
        self.maths: list[int] = []  # math types set on convolution descriptors, in order

    def _add(self, record) -> int:
        self._next += 1
        self.descs[self._next] = record
        return self._next

    def version(self):
        return 90000

    def create(self):
        return HANDLE

    def set_stream(self, handle, stream):
        assert handle == HANDLE

    def tensor4d(self, dtype, n, c, h, w):
        return self._add(["tensor", dtype, (n, c, h, w)])

    def filter4d(self, dtype, k, c, h, w):
        return self._add(["filter", dtype, (k, c, h, w)])

    def conv2d(self, ph, pw, sh, sw, dh, dw, compute, groups, math):
        self.maths.append(math)
        return self._add(["conv", compute, (ph, pw, sh, sw, dh, dw, groups), math])

    def set_math(self, conv, math):
        self.maths.append(math)
        self.descs[conv][3] = math

    def destroy(self, kind, desc):
        assert self.descs.pop(desc)[0] == kind

    def output_dim(self, conv, x, w):
        ph, pw, sh, sw, dh, dw, groups = self.descs[conv][2]
        n, c, h, wd = self.descs[x][2]
        k, cg, kh, kw = self.descs[w][2]
        assert cg * groups == c, "the filter's channels times the groups are the input's"
        return (n, k, (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1,
                (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1)

    def algorithms(self, handle, x, w, conv, y):
        assert handle == HANDLE
        return list(self.ranked)

    def forward(self, handle, alpha, x, px, w, pw_, conv, algo, pws, ws_bytes, beta, y, py):
        assert handle == HANDLE and any(a == algo for a, *_ in self.ranked)
        assert ws_bytes == 0 or pws, "an algorithm with scratch needs a workspace"
        dt = _DTYPES[self.descs[x][1]]
        ph, pw, sh, sw, dh, dw, groups = self.descs[conv][2]
        xs, ws_, ys = self.descs[x][2], self.descs[w][2], self.descs[y][2]
        assert ys == self.output_dim(conv, x, w)
        scal = np.float64 if dt == np.float64 else np.float32
        a, b = (_array(np.dtype(scal), p, (1,))[0] for p in (alpha, beta))
        xa = _array(dt, px, xs).astype(np.float64)
        wa = _array(dt, pw_, ws_).astype(np.float64)
        ya = _array(dt, py, ys)
        n, c, h, wd = xs
        k, cg, kh, kw = ws_
        _, _, oh, ow = ys
        xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
        xp[:, :, ph:ph + h, pw:pw + wd] = xa
        out = np.zeros(ys)
        kg = k // groups
        for g in range(groups):
            xg = xp[:, g * cg:(g + 1) * cg]
            wg = wa[g * kg:(g + 1) * kg]
            for u in range(kh):
                for v in range(kw):
                    win = xg[:, :, u * dh:u * dh + sh * (oh - 1) + 1:sh,
                             v * dw:v * dw + sw * (ow - 1) + 1:sw]
                    out[:, g * kg:(g + 1) * kg] += np.einsum("nchw,kc->nkhw", win, wg[:, :, u, v])
        res = a * out + (b * ya.astype(np.float64) if b else 0)
        ya[...] = res.astype(dt)


class Listed:
    """A cuDNN binding whose convolutions are listed as ``(dtype, x dims, filter dims, (pads,
    strides, dilations, groups), algo, workspace bytes)``: the stand-in on the simulator, the
    library on a GPU."""

    def __init__(self, lib):
        self.lib, self.calls, self.descs = lib, [], {}

    def __getattr__(self, name):
        return getattr(self.lib, name)

    def tensor4d(self, dtype, *dims):
        d = self.lib.tensor4d(dtype, *dims)
        self.descs[d] = (_DTYPES[dtype].name, dims)
        return d

    def filter4d(self, dtype, *dims):
        d = self.lib.filter4d(dtype, *dims)
        self.descs[d] = dims
        return d

    def conv2d(self, *args):
        d = self.lib.conv2d(*args)
        self.descs[d] = tuple(args[:6]) + (args[7],)
        return d

    def forward(self, handle, alpha, x, px, w, pw, conv, algo, pws, ws_bytes, beta, y, py):
        dtype, dims = self.descs[x]
        self.calls.append((dtype, dims, self.descs[w], self.descs[conv], algo, ws_bytes))
        self.lib.forward(handle, alpha, x, px, w, pw, conv, algo, pws, ws_bytes, beta, y, py)
