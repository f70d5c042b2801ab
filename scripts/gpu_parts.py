#!/usr/bin/env python
"""Split the shared models into parts a lent GPU call can carry, and print the calls.

    python scripts/gpu_parts.py [--dest .gpu_models] [--limit-mb 58]

A device call carries the working tree and at most 64 MiB in all (benchmarks/README.md, "On a
lent GPU"), and the shared models are ~185 MB: this copies them (not hard links: onnx refuses
external data with several links) into ``DEST/p1``, ``DEST/p2``, ... of at most ``--limit-mb``
each (the checkout's own files take the rest; a model and its external data stay together),
largest first, and prints for each part the ``carry`` entry, then the line that gathers the
parts carried so far into one model folder on the warm machine (``JITORT_MODEL_DIR``, read by
tests/models.py). ``DEST`` is ignored by git (.gitignore).
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _groups(src: Path) -> list[list[Path]]:
    """Each model with the files its external data lives in (``NAME.onnx.data`` beside it)."""
    out = []
    for model in sorted(src.glob("*.onnx")):
        out.append([model] + sorted(src.glob(model.name + ".*")))
    return out


def split(groups: list[list[Path]], limit: int) -> list[list[Path]]:
    """First-fit decreasing: each group into the first part it fits in (a group larger than
    the limit gets a part of its own)."""
    parts: list[list[Path]] = []
    sizes: list[int] = []
    for g in sorted(groups, key=lambda g: -sum(p.stat().st_size for p in g)):
        size = sum(p.stat().st_size for p in g)
        for i, used in enumerate(sizes):
            if used + size <= limit:
                parts[i] += g
                sizes[i] += size
                break
        else:
            parts.append(list(g))
            sizes.append(size)
    return parts


def main(argv=None) -> int:
    sys.path.insert(0, str(ROOT))
    from tests.models import SHARED
    ap = argparse.ArgumentParser()
    ap.add_argument("--dest", default=".gpu_models")
    ap.add_argument("--limit-mb", type=float, default=58.0)
    a = ap.parse_args(argv)
    groups = _groups(SHARED)
    if not groups:
        print(f"no models under {SHARED}", file=sys.stderr)
        return 1
    dest = ROOT / a.dest
    shutil.rmtree(dest, ignore_errors=True)
    parts = split(groups, int(a.limit_mb * 1e6))
    for i, files in enumerate(parts, 1):
        folder = dest / f"p{i}"
        folder.mkdir(parents=True)
        for f in files:
            shutil.copy2(f, folder / f.name)
        mb = sum(f.stat().st_size for f in files) / 1e6
        names = ", ".join(f.name for f in files if f.suffix == ".onnx")
        print(f"part {i}: {mb:5.1f} MB  carry {a.dest}/p{i}  ({names})")
    # copies, not links: onnx refuses external data behind a link
    print(f"on the machine, after the parts arrived: mkdir -p /tmp/models && "
          f"cp -n {a.dest}/p*/* /tmp/models/ && export JITORT_MODEL_DIR=/tmp/models")
    return 0


if __name__ == "__main__":
    sys.exit(main())
