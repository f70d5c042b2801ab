"""Draw jitort's memory plan for a model at given input shapes as a PNG.

    python scripts/memory_plot.py MODEL --shape input_ids=1,128 --shape attention_mask=1,128 \
        [-o plan.png]

Every workspace tensor is a rectangle: x = the schedule steps it is live, y = its bytes in the
workspace. The black curve is the bytes live per step (its maximum is the lower bound no plan
can beat), the dashed line the workspace jitort allocates. Prints the report per plan.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    name, _, dims = text.partition("=")
    if not name or not dims:
        raise argparse.ArgumentTypeError(f"expected NAME=D1,D2,..., got {text!r}")
    return name, tuple(int(d) for d in dims.replace("x", ",").split(",") if d)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--shape", action="append", type=parse_shape, default=[],
                    help="input shape, NAME=D1,D2,... (repeat per input)")
    ap.add_argument("-o", "--output", default=None, help="PNG path (default: MODEL-plan.png)")
    args = ap.parse_args(argv)
    import jitort
    from jitort.memory import memory_report, plot_plan
    cm = jitort.compile(args.model, example_shapes=[dict(args.shape)])
    for row in memory_report(cm):
        print(f"outputs {row['out_shapes']}: workspace {row['workspace_bytes']:,} B, lower bound "
              f"{row['lower_bound']:,} B ({row['ratio']:.3f}x), {row['tensors']} tensors")
    plan = max(cm.plans(), key=lambda p: p.ws_bytes)
    out = Path(args.output or Path(args.model).with_suffix("").name + "-plan.png")
    shapes = ", ".join(f"{k}={list(v)}" for k, v in args.shape)
    plot_plan(plan, out, title=f"{Path(args.model).name} ({shapes}): memory plan")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
