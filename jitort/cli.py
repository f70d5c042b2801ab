"""The ``jitort`` command line (also ``python -m jitort``).

    jitort bench [MODEL ...] [--repeat N] [--threads N]   jitort vs onnxruntime, side by side
    jitort run MODEL [--input name=file.npy ...]          run once, print output summaries
    jitort explain MODEL [--input name=file.npy ...]      placement, fusion and memory report
    jitort cache info|clear                               the on-disk cache of generated code

With no MODEL, ``bench`` uses the nine "light" models that ship with the onnx package.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def _feeds_for(cm, inputs: list[str], seed: int = 0) -> dict:
    """Feeds from ``name=file.npy`` options; random data (B=1, S=128) for the rest."""
    given = {}
    for item in inputs or []:
        name, _, path = item.partition("=")
        given[name] = np.load(path)
    rng = np.random.default_rng(seed)
    feeds = {}
    for info in cm.inputs:
        if info.name in given:
            feeds[info.name] = given[info.name]
            continue
        shape = [d if isinstance(d, int) else (1 if i == 0 else 128) for i, d in enumerate(info.shape)]
        dt = np.dtype(info.dtype)
        if dt.kind == "f":
            feeds[info.name] = rng.standard_normal(shape).astype(dt)
        elif dt.kind in "iu":
            feeds[info.name] = rng.integers(0, 2 if "mask" in info.name else 100, shape).astype(dt)
        else:
            feeds[info.name] = rng.integers(0, 2, shape).astype(dt)
    return feeds


def _time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def cmd_bench(args) -> int:
    import jitort
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    models = args.models
    if not models:
        import onnx
        light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
        models = sorted(str(p) for p in light.glob("light_*.onnx"))
    rows = []
    print(f"{'model':<28}{'compile s':>10}{'jitort ms':>11}{'ort ms':>9}{'ratio':>8}{'compiled':>10}")
    for path in models:
        name = Path(path).stem.replace("light_", "")
        t = time.perf_counter()
        cm = jitort.compile(path, threads=args.threads)
        feeds = _feeds_for(cm, [])
        cm.run(None, feeds)
        compile_s = time.perf_counter() - t
        ms = 1e3 * _time(lambda: cm.run(None, feeds), args.repeat)
        ort_ms = float("nan")
        if ort is not None:
            so = ort.SessionOptions()
            so.intra_op_num_threads = args.threads or 0
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            sess.run(None, feeds)
            ort_ms = 1e3 * _time(lambda: sess.run(None, feeds), args.repeat)
        ratio = ms / ort_ms
        rows.append(ratio)
        print(f"{name:<28}{compile_s:>10.2f}{ms:>11.2f}{ort_ms:>9.2f}{ratio:>8.2f}"
              f"{cm.compiled_share:>10.0%}", flush=True)
    finite = [r for r in rows if np.isfinite(r)]
    if finite:
        print(f"geomean jitort/ort: {float(np.exp(np.mean(np.log(finite)))):.2f}")
    return 0


def cmd_run(args) -> int:
    import jitort
    cm = jitort.compile(args.model, threads=args.threads)
    outs = cm.run(None, _feeds_for(cm, args.input))
    for name, o in zip(cm.output_names, outs):
        print(f"{name}: {o.dtype}{list(o.shape)} mean={o.mean():.6g} std={o.std():.6g}")
    return 0


def cmd_explain(args) -> int:
    import jitort
    cm = jitort.compile(args.model, threads=args.threads)
    cm.run(None, _feeds_for(cm, args.input))
    print(cm.summary())
    print("passes:", cm.pass_report, "| seconds:",
          {k: round(v, 4) for k, v in cm.pass_report.seconds.items()})
    fb = cm.fallback_nodes()
    print(f"interpreted nodes ({len(fb)}):", ", ".join(fb) or "none")
    for label, why in cm.fallback_reasons.items():
        print(f"  {label}: {why}")
    for p in cm.plans():
        print(f"plan: workspace {p.ws_bytes} B (liveness lower bound {p.memory.lower_bound} B), "
              f"{len(p.kernel_names)} generated kernels/helpers")
        print(f"  source: {p.source_path}")
    return 0


def cmd_cache(args) -> int:
    from .codegen.module import cache_dir
    root = cache_dir()
    if args.action == "clear":
        shutil.rmtree(root, ignore_errors=True)
        print(f"removed {root}")
        return 0
    files = list(root.rglob("*")) if root.exists() else []
    size = sum(f.stat().st_size for f in files if f.is_file())
    print(f"{root}: {sum(1 for f in files if f.suffix == '.py')} generated modules, "
          f"{size / 1e6:.1f} MB")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="jitort", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench", help="jitort vs onnxruntime latency")
    b.add_argument("models", nargs="*")
    b.add_argument("--repeat", type=int, default=20)
    b.add_argument("--threads", type=int, default=None)
    for name, fn in (("run", cmd_run), ("explain", cmd_explain)):
        s = sub.add_parser(name)
        s.add_argument("model")
        s.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
        s.add_argument("--threads", type=int, default=None)
        s.set_defaults(fn=fn)
    c = sub.add_parser("cache")
    c.add_argument("action", choices=["info", "clear"])
    c.set_defaults(fn=cmd_cache)
    b.set_defaults(fn=cmd_bench)
    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
