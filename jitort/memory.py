"""Memory reports: what the static planner did for one input-shape signature.

``memory_report(model)`` summarizes the plans of a compiled model (workspace bytes against the
liveness lower bound, per segment and shape); ``plot_plan(plan, path)`` draws one plan as a PNG
-- every workspace tensor a rectangle spanning its lifetime (x: schedule step) and its bytes
(y: offset) -- the picture that shows at a glance where memory is reused and where the peak
is. Needs matplotlib (``pip install jitort[plot]``).
"""
from __future__ import annotations

from pathlib import Path

from .errors import JitortError


def memory_report(model) -> list[dict]:
    """One row per cached plan: output shapes, workspace bytes, lower bound, ratio, tensors."""
    rows = []
    for p in model.plans():
        rows.append({"out_shapes": [tuple(s) for s in p.out_shapes], "workspace_bytes": p.ws_bytes,
                     "lower_bound": p.memory.lower_bound, "ratio": p.memory.ratio,
                     "tensors": sum(1 for b in p.memory.buffers if b.size > 0)})
    return rows


def plot_plan(plan, path, title: str = "") -> Path:
    """Write a PNG of ``plan`` (a :class:`jitort.codegen.cpu.Plan`) to ``path``."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise JitortError("plotting a memory plan needs matplotlib: pip install 'jitort[plot]'") from e
    mem = plan.memory
    bufs = [b for b in mem.buffers if b.size > 0]
    scale, unit = _unit(max(mem.workspace_bytes, 1))
    fig, ax = plt.subplots(figsize=(12, 6), dpi=110)
    cmap = plt.get_cmap("tab20")
    steps = max((b.end for b in bufs), default=0) + 1
    for i, b in enumerate(sorted(bufs, key=lambda b: (b.begin, b.offset))):
        ax.add_patch(Rectangle((b.begin, b.offset / scale), b.end - b.begin + 1, b.size / scale,
                               facecolor=cmap(i % 20), edgecolor="black", linewidth=0.3, alpha=0.85))
        label = mem.labels.get(b.key, "")
        if label and b.size >= 0.04 * mem.workspace_bytes and b.end - b.begin >= 0.04 * steps:
            ax.text(b.begin + (b.end - b.begin + 1) / 2, (b.offset + b.size / 2) / scale, ("…" + label[-22:]) if len(label) > 23 else label,
                    ha="center", va="center", fontsize=6)
    # live bytes per step: the lower bound is the top of this curve
    live = [0] * (steps + 1)
    for b in bufs:
        for t in range(b.begin, b.end + 1):
            live[t] += b.size
    ax.step(range(steps + 1), [x / scale for x in live], where="post", color="black",
            linewidth=1, label="bytes live (lower bound = its max)")
    ax.axhline(mem.workspace_bytes / scale, color="red", linestyle="--", linewidth=1,
               label=f"workspace {mem.workspace_bytes / scale:.2f} {unit} "
                     f"({mem.ratio:.3f}x the bound {mem.lower_bound / scale:.2f} {unit})")
    ax.set_xlim(0, steps)
    ax.set_ylim(0, max(mem.workspace_bytes, max(live, default=0)) / scale * 1.05)
    ax.set_xlabel("schedule step (kernel)")
    ax.set_ylabel(f"workspace offset ({unit})")
    shapes = ", ".join(str(tuple(s)) for s in plan.out_shapes)
    ax.set_title(title or f"memory plan: {len(bufs)} tensors, outputs {shapes}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.09), ncol=2, fontsize=8, frameon=False)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def _unit(nbytes: int) -> tuple[float, str]:
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if nbytes >= scale:
            return float(scale), unit
    return 1.0, "B"
