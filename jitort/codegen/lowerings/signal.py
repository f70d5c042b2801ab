"""CPU lowerings: signal processing (DFT, STFT, window functions, MelWeightMatrix).

Kernels: ``jitort.kernels.cpu.signal`` (alias ``_signal`` in generated drivers). A DFT is a
real GEMM of the signal rows against a twiddle matrix made once at compile time
(``dft_matrix``, a derived constant keyed on the transform's lengths and flags); an axis other
than the second-to-last is swapped next to the complex axis through scratch first. STFT frames
the signal into scratch (times the window, which may be a run-time input) and runs the same
GEMM. The window generators and MelWeightMatrix usually fold on the host (constant inputs);
the window kernels cover the cases that are not.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ..calls import KernelModule, View, Zeros
from ..registry import Unlowerable, lowering
from .common import _3d, _PLAIN, _is_float, host_value

if TYPE_CHECKING:
    from ..emitter import Emitter

_signal = KernelModule("signal")


def _value(em, n: Node, i: int):
    """Contents of input ``i`` (None when absent); Unlowerable when not known ahead."""
    v = n.input(i)
    if v is None:
        return None
    return host_value(em, n, v, f"input {i} ({v.name})")


def dft_matrix(nuse, ndft, nbins, c, cout, inverse, irfft, dtype):
    """Host-side (numpy) twiddle matrix (nuse*c, nbins*cout) of the DFT described above.

    Forward / inverse complex output (cout 2): y[k] = s * sum_{t<nuse} x[t] e^{-+2 pi i k t / ndft},
    s = 1/ndft when inverse. ``irfft`` (cout 1, c 2): the real inverse of a one-sided spectrum,
    y[t] = 1/ndft * sum_{k<nuse} a_k Re(X_k e^{2 pi i k t / ndft}), a_k = 2 except the DC and
    (even ndft) Nyquist bins. Angles are reduced exactly in integers (k*t mod ndft).
    """
    t = np.arange(nuse, dtype=np.int64)[:, None]
    k = np.arange(nbins, dtype=np.int64)[None, :]
    if irfft:
        # rows: input bins (k), columns: output samples (t)
        kk = np.arange(nuse, dtype=np.int64)[:, None]
        tt = np.arange(nbins, dtype=np.int64)[None, :]
        ang = 2.0 * np.pi * ((kk * tt) % ndft) / ndft
        a = np.full((nuse, 1), 2.0)
        a[0] = 1.0
        if ndft % 2 == 0 and ndft // 2 < nuse:
            a[ndft // 2] = 1.0
        w = np.empty((nuse, 2, nbins), np.float64)
        w[:, 0, :] = a * np.cos(ang) / ndft
        w[:, 1, :] = -a * np.sin(ang) / ndft
        return np.ascontiguousarray(w.reshape(nuse * 2, nbins).astype(dtype))
    ang = 2.0 * np.pi * ((t * k) % max(ndft, 1)) / max(ndft, 1)
    cs, sn = np.cos(ang), np.sin(ang)
    if not inverse:
        sn = -sn
    scale = 1.0 / ndft if inverse else 1.0
    w = np.empty((nuse, c, nbins, 2), np.float64)
    w[:, 0, :, 0] = cs * scale
    w[:, 0, :, 1] = sn * scale
    if c == 2:  # (a + ib)(cos + i sin) = a cos - b sin + i (a sin + b cos)
        w[:, 1, :, 0] = -sn * scale
        w[:, 1, :, 1] = cs * scale
    return np.ascontiguousarray(w.reshape(nuse * c, nbins * 2).astype(dtype))



def _twiddle(em, n: Node, nuse, ndft, nbins, c, cout, inverse, irfft, dtype) -> View:
    key = ("dft", int(nuse), int(ndft), int(nbins), int(c), int(cout), bool(inverse),
           bool(irfft), np.dtype(dtype).str)
    return em.constant(key, lambda: dft_matrix(*key[1:8], dtype))


def _fft_twiddles(ndft: int) -> np.ndarray:
    j = np.arange(ndft // 2, dtype=np.int64)
    ang = 2.0 * np.pi * j / ndft
    return np.stack([np.cos(ang), np.sin(ang)])


def _dft_rows(em, n, x2, rows, nlen, c, w, y2, nbins, cout, fft=None):
    """One transform call over (rows, nlen, c) -> (rows, nbins, cout): the twiddle-matrix GEMM
    (``w``), or when ``fft`` = (ndft, inverse, herm) the radix-2 FFT (a power-of-two length:
    O(n log n) beats the O(n^2) GEMM from the shortest lengths)."""
    xe = x2.reshape(em.sizes((rows, nlen, c)))
    ye = y2.reshape(em.sizes((rows, nbins, cout)))
    if fft is None:
        em.call(_signal.dft_rows, xe, w, ye)
        return
    ndft, inverse, herm = fft
    tw = em.constant(("fft_tw", int(ndft)), lambda: _fft_twiddles(int(ndft)))
    em.call(_signal.fft_rows, xe, tw, ye, em.size(ndft), em.size(int(inverse)),
            em.size(int(herm)))


def _fft_len(ndft: int) -> bool:
    return ndft >= 2 and ndft & (ndft - 1) == 0


@lowering("DFT", supports=lambda n: _is_float(n.inputs[0], n.outputs[0]))
def lower_dft(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    xs, ys = em.shape(x), em.shape(y)
    r = len(xs)
    if n.since_version >= 20:
        av = _value(em, n, 2)
        axis = int(av.reshape(-1)[0]) if av is not None else -2
    else:
        axis = int(n.attrs.get("axis", 1))
    axis = axis + r if axis < 0 else axis
    if not 0 <= axis < r - 1:
        raise Unlowerable(n, f"axis {axis} out of range")
    inverse = bool(n.attrs.get("inverse", 0))
    onesided = bool(n.attrs.get("onesided", 0))
    c, cout = int(xs[-1]), int(ys[-1])
    length = int(xs[axis])
    nbins = int(ys[axis])
    dl = _value(em, n, 1)
    irfft = inverse and onesided
    if irfft:
        if c != 2:
            raise Unlowerable(n, "inverse one-sided DFT needs a complex input")
        ndft = int(dl.reshape(-1)[0]) if dl is not None else 2 * (length - 1)
        nuse = min(length, ndft // 2 + 1)
        if ndft // 2 + 1 != length and (ndft % 2 or ndft // 2 + 1 > length):
            # onnxruntime does not take the standard irfft here (it mirrors all input bins)
            raise Unlowerable(n, f"inverse one-sided DFT of {length} bins to length {ndft}")
    else:
        ndft = int(dl.reshape(-1)[0]) if dl is not None else length
        nuse = min(length, ndft)
    o, _, i = _3d(xs[:-1], axis)
    fft = (ndft, inverse, irfft) if _fft_len(ndft) else None
    w = None if fft else _twiddle(em, n, nuse, ndft, nbins, c, cout, inverse, irfft, x.dtype)
    xv = em.read(x)
    yv = em.write(y)
    if i == 1:
        _dft_rows(em, n, xv, o, length, c, w, yv, nbins, cout, fft)
        return
    # the transform axis is not next to the complex axis: swap it there through scratch
    xt = em.temp(o * i * length * c, x.dtype)
    yt = em.temp(o * i * nbins * cout, x.dtype)
    em.call(_signal.swap12, xv.reshape(em.sizes((o, length, i, c))),
            xt.reshape(em.sizes((o, i, length, c))))
    _dft_rows(em, n, xt, o * i, length, c, w, yt, nbins, cout, fft)
    em.call(_signal.swap12, yt.reshape(em.sizes((o, i, nbins, cout))),
            yv.reshape(em.sizes((o, nbins, i, cout))))


@lowering("STFT", supports=lambda n: _is_float(n.inputs[0], n.outputs[0]))
def lower_stft(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    xs, ys = em.shape(x), em.shape(y)
    step = int(_value(em, n, 1).reshape(-1)[0])
    win = n.inputs[2] if len(n.inputs) > 2 else None
    b, frames, nbins, _ = ys
    c = int(xs[2])
    fl = _value(em, n, 3)
    if fl is not None:
        flen = int(fl.reshape(-1)[0])
    elif win is not None:
        flen = int(em.shape(win)[0])
    else:
        flen = int(xs[1])
    if win is not None and int(em.shape(win)[0]) != flen:
        raise Unlowerable(n, "window length differs from frame_length")
    if step <= 0:
        raise Unlowerable(n, f"frame_step {step}")
    fft = (flen, False, False) if _fft_len(flen) else None
    w = None if fft else _twiddle(em, n, flen, flen, nbins, c, 2, False, False, x.dtype)
    fr = em.temp(b * frames * flen * c, x.dtype)
    wv = em.read(win) if win is not None else Zeros(np.dtype(x.dtype).name, (0,))
    yv = em.write(y)
    em.call(_signal.stft_frames, em.read(x), wv, em.size(step),
            fr.reshape(em.sizes((b, frames, flen, c))))
    _dft_rows(em, n, fr, b * frames, flen, c, w, yv, nbins, 2, fft)


def _gen_ok(n: Node) -> bool:
    y = n.outputs[0]
    return y.dtype is not None and np.dtype(y.dtype) in _PLAIN


_WINDOW_KIND = {"HannWindow": 0, "HammingWindow": 1, "BlackmanWindow": 2}


@lowering("HannWindow", "HammingWindow", "BlackmanWindow", supports=_gen_ok)
def lower_window(em: Emitter, n: Node) -> None:
    """Only reached when the size is not a constant (constant windows fold on the host): the
    length comes from the output shape."""
    yv = em.write(n.outputs[0])
    em.call(_signal.window, yv, em.size(_WINDOW_KIND[n.op_type]),
            em.size(int(n.attrs.get("periodic", 1))))


@lowering("MelWeightMatrix", supports=_gen_ok)
def lower_mel(em: Emitter, n: Node) -> None:
    """Only reached when some input is not a constant: num_mel_bins and dft_length are known
    ahead (they shape the output), the rates and edges are read at run time."""
    dl = _value(em, n, 1)
    if dl is None:
        raise Unlowerable(n, "dft_length missing")
    yv = em.write(n.outputs[0])
    em.call(_signal.mel_weight_matrix, yv, em.size(int(dl.reshape(-1)[0])),
            *[em.read(v) for v in n.inputs[2:5]])
