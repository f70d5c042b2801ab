"""Shape functions: ops of the signal / remaining-numeric family not covered elsewhere
(DFT and STFT live in :mod:`.rnn`, Det and the losses in :mod:`.shape_ops`)."""
from __future__ import annotations

from .core import _fail, register


@register("BitCast")
def _bitcast(node, shapes, values):
    if shapes[0] is None:
        raise _fail(node, "input 0 is missing", shapes)
    return [shapes[0]]
