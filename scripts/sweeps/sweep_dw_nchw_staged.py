#!/usr/bin/env python
"""The A/B behind ``layout.staged_nchw``: depthwise layers left NCHW by the layout pass, each
compiled twice in this process -- on the NCHW kernels and on ``conv_nhwc.dwconv_staged`` (the
rule forced off / on through ``layout.staged_nchw``, which the conv lowering consults) --
called alternately, round by round; prints staged / nchw per layer and what the rule picks.

    python scripts/sweeps/sweep_dw_nchw_staged.py [--threads 1] [--rounds 9] [--only "c % 16"]

Layers: 8-120 channels x (3x3 stride 1, 3x3 stride 2, 5x5 stride 1) x 28x28 / 56x56 inputs,
with a bias, one image. The generated programs go to a temporary ``JITORT_CACHE_DIR``.
"""
import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CHANNELS = (8, 16, 24, 32, 40, 48, 64, 72, 96, 120)
KINDS = ((3, 1), (3, 2), (5, 1))
PLANES = (28, 56)


def _model(c, h, k, s, seed):
    from onnx import TensorProto, helper
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((c, 1, k, k)) * 0.2).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=c, strides=[s, s],
                            pads=[(k - 1) // 2] * 4)
    g = helper.make_graph([node], "dw", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, c, h, h])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)],
        initializer=[helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()),
                     helper.make_tensor("b", TensorProto.FLOAT, b.shape, b)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--only", default=None,
                    help="a Python expression over c, h, k, s selecting layers")
    a = ap.parse_args()
    os.environ["JITORT_CACHE_DIR"] = tempfile.mkdtemp(prefix="jitort-sweep-")
    import jitort
    from jitort.passes import layout
    rule = layout.staged_nchw

    def forced(n):   # the rule without its channel condition: every depthwise the tiles take
        if not layout._plain_conv2d(n):
            return False
        c, (m, cg) = n.inputs[0].shape[1], n.inputs[1].const.shape[:2]
        return c == m == int(n.attrs.get("group", 1)) and cg == 1 and layout._staged_kernel(n)

    ratios = {True: [], False: []}
    for c in CHANNELS:
        for k, s in KINDS:
            for h in PLANES:
                if a.only and not eval(a.only, {}, dict(c=c, h=h, k=k, s=s)):
                    continue
                x = np.random.default_rng(0).standard_normal((1, c, h, h)).astype(np.float32)
                fns = []
                for seed, choice in ((1, lambda n: False), (2, forced)):
                    layout.staged_nchw = choice   # read by the lowering at the first call
                    try:
                        cm = jitort.compile(_model(c, h, k, s, seed), threads=a.threads,
                                            tiered=False)
                        cm(x)
                    finally:
                        layout.staged_nchw = rule
                    src = "".join(Path(p).read_text() for p in cm.generated_sources())
                    if ("dwconv_staged" in src) != (choice is forced):
                        # staged without the rule: a one-node channels-last region
                        # (layout.staged_depthwise), not this rule's layer
                        assert choice is not forced, (c, h, k, s)
                        print(f"{c:4d}ch {h:3d}x{h:<3d} {k}x{k}/{s}  staged by "
                              "layout.staged_depthwise, not this rule's", flush=True)
                        break
                    fns.append(cm)
                if len(fns) < 2:
                    continue
                n = max(20, int(0.02 / max(1e-6, _time(fns[0], x, 3))))
                t = [[], []]
                for _ in range(a.rounds):
                    for i, f in enumerate(fns):
                        t[i].append(_time(f, x, n))
                nchw, staged = (float(np.median(v)) * 1e6 for v in t)
                (node,) = [nd for nd in fns[0].graph.nodes if nd.op_type in ("Conv", "FusedConv")]
                picks = rule(node)
                ratios[picks].append(staged / nchw)
                print(f"{c:4d}ch {h:3d}x{h:<3d} {k}x{k}/{s}  nchw {nchw:7.1f} us  staged "
                      f"{staged:7.1f} us  staged/nchw {staged / nchw:5.2f}  rule: "
                      f"{'staged' if picks else 'nchw'}", flush=True)
    for picks, r in ratios.items():
        if r:
            print(f"layers the rule stages: {'yes' if picks else 'no'}: staged/nchw "
                  f"{min(r):.2f}-{max(r):.2f}, geomean {np.exp(np.mean(np.log(r))):.2f} "
                  f"({len(r)} layers)")


def _time(f, x, n):
    t = time.perf_counter()
    for _ in range(n):
        f(x)
    return (time.perf_counter() - t) / n


if __name__ == "__main__":
    main()
