"""CUDA lowering of ONNX LSTM (``jitort.kernels.cuda.rnn.lstm``): one kernel call per node.

Without it a CRNN's bidirectional LSTMs ran on the CPU backend between GPU segments, with a
copy to the host and back and a synchronization around each. Handled: opsets 7 and 14,
layout 0, directions forward / reverse / bidirectional, the default activations (sigmoid,
tanh, tanh, whether named or not), float32 or float64, optional B, initial_h, initial_c and
any subset of the outputs Y, Y_h, Y_c.

Refused (the node stays on the CPU backend, whose kernel honours everything): other
activations, clip, input_forget=1, peepholes P, layout=1, other dtypes, hidden sizes above
the kernel's shared-memory bound (``kernels/cuda/rnn.py`` HMAX), and sequence_lens unless
its value is known when the segment is planned and every length is the full sequence (then
it changes nothing). The attribute and dtype refusals are static (the support predicate, so
the node is placed on the CPU at compile time); the shape and value ones raise
:class:`~jitort.codegen.registry.Unlowerable` when a segment is planned.
"""
from __future__ import annotations

import numpy as np

from ...ir import Node
from ..calls import KernelModule
from ..cuda_emit import CudaEmitter, _gemm, lowering
from ..lowerings.rnn import _activations, _directions, _name, _rnn_ok, _wanted
from ..registry import Unlowerable

_rnn = KernelModule("rnn", package="cuda")

#: the kernel's bound on the hidden size (``jitort.kernels.cuda.rnn.HMAX``: not imported, so
#: that lowering modules do not import numba.cuda)
HMAX = 512

# input indices
_B, _SEQ, _H0, _C0, _P = 3, 4, 5, 6, 7


def refusal(n: Node) -> str | None:
    """Why the CUDA LSTM does not take ``n`` whatever its shapes, or None."""
    if not _rnn_ok(n):
        return "dtypes or direction"
    acts = _activations(n)
    if acts is None or acts[0] != [0, 1, 1] * _directions(n):
        return "activations other than sigmoid, tanh, tanh"
    if n.attrs.get("clip") is not None:
        return "clip"
    if n.attrs.get("input_forget", 0):
        return "input_forget"
    if n.input(_P) is not None:
        return "peepholes"
    if n.since_version >= 14 and n.attrs.get("layout", 0):
        return "layout 1"
    sl = n.input(_SEQ)
    if sl is not None and not sl.is_const and sl.producer is None:
        return "sequence_lens is a model input (known only when the model runs)"
    return None


def _seq_lens_full(em: CudaEmitter, n: Node, seq: int) -> None:
    """Unlowerable unless sequence_lens is absent or known now and all ``seq``."""
    sl = n.input(_SEQ)
    if sl is None:
        return
    val = sl.const if sl.is_const else em.hostvals.get(id(sl))
    if val is None:
        raise Unlowerable(n, "sequence_lens not known when the segment is planned")
    if np.any(np.asarray(val).reshape(-1) != seq):
        raise Unlowerable(n, "sequence_lens shorter than the sequence")


@lowering("LSTM", supports=lambda n: refusal(n) is None)
def lower_lstm(em: CudaEmitter, n: Node) -> None:
    why = refusal(n)
    if why is not None:
        raise Unlowerable(n, why)
    x, w, r = n.inputs[:3]
    seq, batch, nin = em.shape(x)
    nd, hd = em.shape(r)[0], em.shape(r)[2]
    if hd > HMAX:
        raise Unlowerable(n, f"hidden size {hd} > {HMAX}")
    _seq_lens_full(em, n, seq)
    reverse = _name(n.attrs.get("direction", "forward")) == "reverse"
    xv = em.read(x)
    args = [xv, em.read(w), em.read(r)]
    present = []
    for i in (_B, _H0, _C0):
        v = n.input(i)
        present.append(v is not None)
        args.append(em.read(v) if v is not None else xv)  # an absent one is not read
    outs = [o if _wanted(o) else None for o in n.outputs] + [None] * (3 - len(n.outputs))
    for o in outs[:3]:
        args.append(em.write(o) if o is not None else xv)  # an absent one is not written
    # the input projection of every step first, one GEMM per direction into scratch: the
    # recurrence's sequential steps then only add R h
    proj = ()
    if seq * batch * nin:
        g = em.temp(nd * seq * batch * 4 * hd, x.dtype)
        for d in range(nd):
            em.call(_gemm.gemm, xv, args[1].at(em.size(d * 4 * hd * nin)), xv, em.size(0),
                    em.size(0), g.at(em.size(d * seq * batch * 4 * hd)),
                    *em.sizes((seq * batch, 4 * hd, nin)), 1.0, 0.0, False, True, False)
        proj = (g,)
    em.call(_rnn.lstm, *args, *em.sizes((seq, batch, nin, hd, nd)), reverse, *present,
            *(o is not None for o in outs[:3]), *proj)
