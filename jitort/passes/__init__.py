"""The optimization pipeline: one ordered list of named passes.

Each pass is ``fn(graph) -> int`` returning how many rewrites it made (0 = unchanged). The
manager runs the list to a fixed point (bounded), times every pass, names the failing pass in
errors, verifies the IR after each pass when ``JITORT_DEBUG>=2`` and can dump the IR after a
named pass (``JITORT_DUMP_AFTER=name``): the ``debug_passes`` and ``dump_after`` fields of the
compile's :class:`~jitort.options.Options`, as ``layout`` turns the layout pass off.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from ..errors import InvalidModel, JitortError
from ..options import Options
from ..ir import Graph
from .simplify import (eliminate_dead_code, eliminate_identities, eliminate_common_subexpressions,
                       fold_constants, fold_transposes, sum_as_add, channel_prelu_slope)
from .expand import expand_other_domains
from .layout import convert_to_channels_last
from .precision import compute_16bit_in_float32, keep_half_products
from .epilogues import fuse_epilogues, fuse_epilogues_half
from .patterns import (fold_conv_affine, fold_conv_batchnorm, fold_pad_into_conv,
                       fuse_matmul_add, fuse_matmul_add_half, subsample_strided_pointwise)

log = logging.getLogger("jitort.passes")

PassFn = Callable[[Graph], int]

#: The recipe. Order matters: fold before CSE so equal constants merge, fuse patterns after the
#: graph is clean (epilogues after MatMul+Add so the activation lands on the MatMulBias), DCE
#: last to drop what the rewrites left behind.
DEFAULT_PIPELINE: list[tuple[str, PassFn]] = [
    ("expand_other_domains", expand_other_domains),  # contrib ops -> ONNX subgraphs (expand.py)
    ("eliminate_identities", eliminate_identities),
    ("sum_as_add", sum_as_add),
    ("channel_prelu_slope", channel_prelu_slope),  # PRelu-6's per-channel slope
    ("fold_transposes", fold_transposes),
    ("fold_constants", fold_constants),
    ("eliminate_common_subexpressions", eliminate_common_subexpressions),
    ("fold_pad_into_conv", fold_pad_into_conv),
    ("fold_conv_batchnorm", fold_conv_batchnorm),
    ("fold_conv_affine", fold_conv_affine),
    ("fuse_matmul_add", fuse_matmul_add),
    ("fuse_epilogues", fuse_epilogues),
    # after the patterns (which fuse 16-bit nodes too): ops without a 16-bit lowering
    ("compute_16bit_in_float32", compute_16bit_in_float32),
    ("eliminate_dead_code", eliminate_dead_code),
]

#: The CPU backend's recipe: the default one, plus the channels-last regions of depthwise
#: convolutions (:mod:`.layout`) once the epilogues are fused, then strided 1x1 convolutions
#: (NCHW ones: after the layout pass) on a subsampled input.
CPU_PIPELINE: list[tuple[str, PassFn]] = (
    DEFAULT_PIPELINE[:-1] + [("convert_to_channels_last", convert_to_channels_last),
                             ("subsample_strided_pointwise", subsample_strided_pointwise)]
    + DEFAULT_PIPELINE[-1:])

#: The CUDA backend's recipe: the default one, float16 matrix products left in float16 (its
#: GEMM takes them: cuBLAS on tensor cores, float32 accumulation), their biases, residuals and
#: activations fused in float16 too (its epilogues compute in float32 and round once).
_CUDA_PASSES = {"compute_16bit_in_float32": keep_half_products,
                "fuse_matmul_add": fuse_matmul_add_half, "fuse_epilogues": fuse_epilogues_half}
CUDA_PIPELINE: list[tuple[str, PassFn]] = [
    (name, _CUDA_PASSES.get(name, fn)) for name, fn in DEFAULT_PIPELINE]


@dataclass
class PassReport:
    """What the pipeline did: rewrites and seconds per pass name."""

    rewrites: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def __str__(self) -> str:
        return ", ".join(f"{k}: {v}" for k, v in self.rewrites.items() if v) or "no rewrites"


#: pass name -> whether the options let it run
_ENABLED: dict[str, Callable[[Options], bool]] = {
    "convert_to_channels_last": lambda o: o.layout != "nchw"}


def run_pipeline(graph: Graph, pipeline: list[tuple[str, PassFn]] | None = None,
                 max_rounds: int = 4, options: Options | None = None) -> PassReport:
    """Run ``pipeline`` over ``graph`` in place until nothing changes (at most ``max_rounds``).
    ``options``: the compile's settings (default: from the environment)."""
    options = Options.from_env() if options is None else options
    pipeline = [(name, fn) for name, fn in (DEFAULT_PIPELINE if pipeline is None else pipeline)
                if _ENABLED.get(name, lambda o: True)(options)]
    report = PassReport()
    debug, dump_after = options.debug_passes, options.dump_after
    for _ in range(max_rounds):
        changed = 0
        for name, fn in pipeline:
            t0 = time.perf_counter()
            try:
                n = fn(graph)
            except JitortError:
                raise
            except Exception as e:
                raise InvalidModel(f"pass {name} failed: {type(e).__name__}: {e}") from e
            report.seconds[name] = report.seconds.get(name, 0.0) + time.perf_counter() - t0
            report.rewrites[name] = report.rewrites.get(name, 0) + n
            changed += n
            if n and debug >= 2:
                graph.verify()
            if name == dump_after:
                print(f"--- IR after {name} ---\n{graph}")
            if n:
                log.debug("%s: %d rewrites", name, n)
        if not changed:
            break
    return report
