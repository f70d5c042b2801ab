"""The ``jitort`` command line (also ``python -m jitort``).

    jitort bench [MODEL ...] [--repeat N] [--threads N]     jitort vs onnxruntime, side by side
    jitort run MODEL [--input name=file.npy] [--shape name=1x128] [--profile TRACE.json]
    jitort explain MODEL [--input ...] [--shape ...]        passes, fusion, fallbacks, memory,
                                                            FLOPs and GFLOP/s per kernel vs peak
    jitort warmup MODEL ... [--shape name=1x128] [--jobs N] compile into the on-disk cache
    jitort warmup --library [--jobs N] [--only KERNEL]      the kernel library, in N processes
    jitort cache info|prune|clear                           the on-disk caches (generated code, kernels)
    jitort batch MODEL --input PATH --output DIR [--engine local|ray] [--workers N]
                 [--batch-size B] [--threads-per-worker T] [--on-error raise|skip]
                                                            a Parquet dataset through the model

With no MODEL, ``bench`` and ``warmup`` use the nine "light" models that ship with the onnx
package. Unspecified symbolic dims are 1 for the first dim and 128 for the others. Progress
bars (tqdm) appear only on a terminal; ``-v`` turns on jitort's INFO logging.
"""
from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import jitort

log = logging.getLogger("jitort")


# --- feeds -------------------------------------------------------------------------------------

def parse_shapes(items: list[str]) -> list[dict[str, tuple[int, ...]]]:
    """``["ids=1x128", "ids=8x128", "mask=1x128"]`` -> shape sets ``[{ids, mask}, {ids, mask}]``.

    A name given k times makes k sets; names given fewer times repeat their last shape.
    """
    per: dict[str, list[tuple[int, ...]]] = {}
    for item in items or []:
        name, sep, dims = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"--shape expects NAME=DIMS like input_ids=1x128, got {item!r}")
        try:
            shape = tuple(int(x) for x in dims.lower().replace(",", "x").split("x") if x != "")
        except ValueError:
            raise SystemExit(f"--shape {item!r}: dims must be integers like 1x128") from None
        per.setdefault(name, []).append(shape)
    n = max((len(v) for v in per.values()), default=1)
    return [{k: v[min(i, len(v) - 1)] for k, v in per.items()} for i in range(n)]


def feeds_for(cm, inputs: list[str], seed: int = 0, shapes: dict | None = None) -> dict:
    """Feeds from ``name=file.npy`` options and declared shapes; random data for the rest."""
    given = {}
    for item in inputs or []:
        name, _, path = item.partition("=")
        given[name] = np.load(path)
    shapes = shapes or {}
    rng = np.random.default_rng(seed)
    feeds = {}
    for info in cm.inputs:
        if info.name in given:
            feeds[info.name] = given[info.name]
            continue
        shape = shapes.get(info.name)
        if shape is None:
            shape = [d if isinstance(d, int) else (1 if i == 0 else 128)
                     for i, d in enumerate(info.shape)]
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


def _light_models() -> list[str]:
    import onnx
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return sorted(str(p) for p in light.glob("light_*.onnx"))


def _name(path: str) -> str:
    return Path(path).stem.replace("light_", "")


# --- bench -------------------------------------------------------------------------------------

def cmd_bench(args) -> int:
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    models = args.models or _light_models()
    rows = []
    print(f"{'model':<28}{'first s':>8}{'compile s':>10}{'jitort ms':>11}{'ort ms':>9}"
          f"{'ratio':>8}{'compiled':>10}")
    for path in models:
        t = time.perf_counter()
        cm = jitort.compile(path, threads=args.threads)
        feeds = feeds_for(cm, [])
        cm.run(None, feeds)  # the first result (the interpreter tier while the code compiles)
        first_s = time.perf_counter() - t
        if not cm.wait_compiled():  # steady state is the compiled program's, never tier 0's
            print(f"{_name(path):<28}{first_s:>8.2f}  compiling failed, see the warning")
            continue
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
        print(f"{_name(path):<28}{first_s:>8.2f}{compile_s:>10.2f}{ms:>11.2f}{ort_ms:>9.2f}"
              f"{ratio:>8.2f}"
              f"{cm.compiled_share:>10.0%}", flush=True)
    finite = [r for r in rows if np.isfinite(r)]
    if finite:
        print(f"geomean jitort/ort: {float(np.exp(np.mean(np.log(finite)))):.2f}")
    return 0


# --- run ---------------------------------------------------------------------------------------

def cmd_run(args) -> int:
    cm = jitort.compile(args.model, threads=args.threads, profile=bool(args.profile))
    outs = cm.run(None, feeds_for(cm, args.input, shapes=parse_shapes(args.shape)[0]))
    for name, o in zip(cm.output_names, outs):
        print(f"{name}: {o.dtype}{list(o.shape)} mean={o.mean():.6g} std={o.std():.6g}")
    if args.profile:
        print(f"profile: {cm.end_profiling(args.profile)}")
    return 0


# --- explain -----------------------------------------------------------------------------------

def cmd_explain(args) -> int:
    from jitort.profiling import machine_peak_gflops
    cm = jitort.compile(args.model, threads=args.threads, profile=True)
    feeds = feeds_for(cm, args.input, shapes=parse_shapes(args.shape)[0])
    t = time.perf_counter()
    cm.run(None, feeds)  # plans and compiles (or loads from the cache)
    first = time.perf_counter() - t
    cm.profiler.reset()
    t = time.perf_counter()
    for _ in range(args.repeat):
        cm.run(None, feeds)
    per_run = (time.perf_counter() - t) / max(args.repeat, 1)
    print(explain_report(cm, first, per_run, machine_peak_gflops()))
    if args.trace:
        print(f"trace: {cm.end_profiling(args.trace)}")
    return 0


def explain_report(cm, first_s: float, per_run_s: float, peak: float) -> str:
    """The text of ``jitort explain`` for a model compiled with ``profile=True`` and run."""
    from jitort import tuning
    out = [cm.summary()]
    out += ["choices: " + line for line in tuning.summary_lines()]
    if getattr(cm, "device", "cpu") == "cuda":
        out += ["choices: " + line for line in tuning.summary_lines("cuda")]
    applied = [f"{k} x{v}" for k, v in cm.pass_report.rewrites.items() if v]
    out.append("passes applied: " + (", ".join(applied) or "none"))
    out.append("pass seconds: " + ", ".join(f"{k} {v:.4f}" for k, v in
                                            cm.pass_report.seconds.items()))
    fb = cm.fallback_nodes()
    out.append(f"interpreted nodes ({len(fb)}): " + (", ".join(fb) or "none"))
    for label, why in cm.fallback_reasons.items():
        out.append(f"  {label}: {why}")
    for p in cm.plans():
        out.append(f"plan: workspace {p.ws_bytes:,} B (liveness lower bound "
                   f"{p.memory.lower_bound:,} B), {len(p.kernel_names)} generated kernels/helpers, "
                   f"{len(p.parts or [])} steps")
        out.append(f"  source: {p.source_path}")
        groups = [pt for pt in (p.parts or []) if len(pt.nodes) > 1]
        if groups:
            out.append(f"  fusion groups ({len(groups)}):")
            for pt in groups:
                out.append(f"    {pt.name}: {' + '.join(pt.ops)}")
    stats = cm.profiler.kernel_stats()
    total_ns = sum(s.total_ns for s in stats) or 1
    out.append(f"first call {first_s * 1e3:.1f} ms (plan + compile or cache load); "
               f"then {per_run_s * 1e3:.3f} ms per run; machine peak {peak:.1f} GFLOP/s "
               "(numpy float32 GEMM)")
    out.append(f"{'kernel':<44}{'ops':<30}{'calls':>6}{'mean us':>10}{'time':>7}"
               f"{'MFLOP':>9}{'GFLOP/s':>9}{'peak':>7}")
    for s in sorted(stats, key=lambda s: -s.total_ns):
        ops = ",".join(s.ops)
        ops = ops if len(ops) <= 29 else ops[:26] + "..."
        name = s.name if s.kind == "kernel" else f"[interp] {s.name}"
        name = name if len(name) <= 43 else name[:40] + "..."
        gf = s.gflops
        out.append(f"{name:<44}{ops:<30}{s.calls:>6}{s.mean_us:>10.1f}"
                   f"{s.total_ns / total_ns:>7.1%}{s.flops / 1e6:>9.2f}{gf:>9.2f}"
                   f"{gf / peak if peak else 0:>7.1%}")
    flops = sum(s.flops for s in stats)
    mean_ns = sum(s.total_ns / max(s.calls, 1) for s in stats) or 1
    out.append(f"total: {flops / 1e6:.2f} MFLOP per run, {flops / mean_ns:.2f} GFLOP/s "
               f"in kernels ({flops / mean_ns / peak if peak else 0:.1%} of peak)")
    return "\n".join(out)


# --- warmup ------------------------------------------------------------------------------------

def warmup_model(path: str, shape_sets: list[dict], threads=None, position: int = 0,
                 progress: bool | None = None) -> dict:
    """Compile ``path`` for each declared shape set into the on-disk cache.

    Shows one progress bar per model, advancing per generated kernel compiled (kernels found
    in Numba's cache count at the end). Returns counts and seconds.
    """
    import numba
    from tqdm.auto import tqdm

    from jitort.codegen import module as modmgr

    name = _name(path)
    bar = tqdm(total=0, desc=f"{name:<16}", unit="kernel", position=position, leave=True,
               disable=None if progress is None else not progress, dynamic_ncols=True)
    counts = {"compiled": 0}

    def on_load(mname, mod):
        n = sum(1 for obj in vars(mod).values()
                if isinstance(obj, numba.core.registry.CPUDispatcher)
                and getattr(obj.py_func, "__module__", None) == mod.__name__)
        bar.total += n
        bar.refresh()

    class Listener(numba.core.event.Listener):
        def on_start(self, event):
            pass

        def on_end(self, event):
            disp = event.data.get("dispatcher")
            fn = getattr(disp, "py_func", None)
            module = str(getattr(fn, "__module__", ""))
            if fn is not None and module.startswith(modmgr.PACKAGE + "."):
                counts["compiled"] += 1
                bar.set_postfix_str(fn.__name__[:40], refresh=False)
                bar.update(1)

    listener = Listener()
    modmgr.load_hooks.append(on_load)
    numba.core.event.register("numba:compile", listener)
    t = time.perf_counter()
    try:
        cm = jitort.compile(path, threads=threads, tiered=False)
        for shapes in shape_sets:
            cm.run(None, feeds_for(cm, [], shapes=shapes))
    finally:
        numba.core.event.unregister("numba:compile", listener)
        modmgr.load_hooks.remove(on_load)
        cached = max(bar.total - counts["compiled"], 0)
        bar.n = bar.total
        bar.set_postfix_str(f"{counts['compiled']} compiled, {cached} cached", refresh=False)
        bar.close()
    seconds = time.perf_counter() - t
    return {"model": name, "compiled": counts["compiled"], "cached": cached,
            "seconds": seconds, "sources": cm.generated_sources()}


def _warmup_worker(job):
    path, shape_sets, threads, position, progress = job
    return warmup_model(path, shape_sets, threads, position, progress)


def cmd_memory(args) -> int:
    """Plan the model for the declared shapes, print the memory report, draw the plan as a PNG."""
    from jitort.memory import memory_report, plot_plan
    shape_sets = parse_shapes(args.shape)
    cm = jitort.compile(args.model, example_shapes=shape_sets if args.shape else None,
                        tiered=False)
    if not args.shape:
        cm.run(None, feeds_for(cm, [], shapes={}))
    for row in memory_report(cm):
        print(f"outputs {row['out_shapes']}: workspace {row['workspace_bytes']:,} B, lower bound "
              f"{row['lower_bound']:,} B ({row['ratio']:.3f}x), {row['tensors']} tensors")
    plan = max(cm.plans(), key=lambda p: p.ws_bytes)
    out = Path(args.png or Path(args.model).with_suffix("").name + "-plan.png")
    shapes = ", ".join(f"{k}={'x'.join(map(str, v))}" for k, v in (shape_sets[-1] if args.shape else {}).items())
    plot_plan(plan, out, title=f"{Path(args.model).name} ({shapes or 'declared shapes'}): memory plan")
    print(f"wrote {out}")
    return 0


def cmd_warmup_library(args) -> int:
    """``jitort warmup --library``: the kernel library's entries into Numba's on-disk cache."""
    from jitort import library
    only = [o for item in args.only or [] for o in item.split(",") if o]
    es = library.entries(only=only)
    if not es:
        print(f"no library entries match {only}")
        return 1
    r = library.compile_entries(es, jobs=args.jobs, progress=False if args.quiet else None)
    print(f"kernel library: {r['entries']} entries, {r['compiled']} compiled in {r['jobs']} "
          f"processes, {r['cached']} were cached, {r['seconds']:.1f} s")
    worst = sorted(r["per_entry"].items(), key=lambda kv: -kv[1])[:10]
    for text, secs in worst:
        print(f"  {secs:6.1f} s  {text.split('(', 1)[0]}")
    return 0


def cmd_tune(args) -> int:
    """``jitort tune``: measure the implementation choices on this machine (``jitort.tuning``)."""
    from jitort import tuning
    device = args.device
    if args.show:
        print(tuning.show(device=device))
        return 0
    only = [o for item in args.only or [] for o in item.split(",") if o]
    known = tuning.choices(device)
    unknown = [o for o in only if o not in known]
    if unknown:
        print(f"unknown {device} choices {unknown}; known: {sorted(known)}")
        return 1
    if device == "cuda" and not tuning.measurable_gpu():
        print("jitort tune --device cuda: no CUDA GPU here (" + (
            "the CUDA simulator's timings would decide nothing a GPU could use"
            if tuning.machine("cuda") else "numba's CUDA target cannot run") + ")")
        return 1
    t = time.perf_counter()
    try:
        got = tuning.tune(only=only or None, budget_s=args.budget,
                          progress=False if args.quiet else None, device=device)
    finally:
        if args.background:
            tuning.decisions_path(device).with_suffix(".running").unlink(missing_ok=True)
    if not args.quiet:
        n = sum(len(e["buckets"]) for e in got.values())
        print(f"calibrated {n} buckets of {len(got)} choices in {time.perf_counter() - t:.1f} s:"
              f" {tuning.decisions_path(device)}")
        print(tuning.show(device=device))
    return 0


def cmd_warmup(args) -> int:
    if not args.no_tune:
        from jitort import tuning
        if tuning.enabled():
            tuning.tune(progress=False if args.quiet else None)
    if args.library:
        return cmd_warmup_library(args)
    if args.only:
        raise SystemExit("--only goes with --library")
    args.jobs = args.jobs or 1
    models = args.models or _light_models()
    shape_sets = parse_shapes(args.shape)
    progress = False if args.quiet else None  # None: tqdm decides (a TTY shows bars)
    results = []
    if args.jobs <= 1 or len(models) == 1:
        for path in models:
            results.append(warmup_model(path, shape_sets, args.threads, 0, progress))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        # spawn: a forked child would inherit Numba's/OpenMP's threads in an unknown state
        ctx = multiprocessing.get_context("spawn")
        jobs = [(p, shape_sets, args.threads, i, progress) for i, p in enumerate(models)]
        with ProcessPoolExecutor(max_workers=args.jobs, mp_context=ctx) as ex:
            results = list(ex.map(_warmup_worker, jobs))
    from jitort.codegen.module import cache_dir
    for r in results:
        print(f"{r['model']}: {r['compiled']} kernels compiled, {r['cached']} from cache, "
              f"{r['seconds']:.1f} s")
    print(f"cache: {cache_dir()}")
    return 0


# --- cache -------------------------------------------------------------------------------------

def _size(d: Path) -> tuple[int, int]:
    files = [f for f in d.rglob("*") if f.is_file()]
    return sum(f.stat().st_size for f in files), sum(1 for f in files if f.suffix == ".nbc")


def cmd_cache(args) -> int:
    from jitort.codegen.module import cache_dir, gen_hash
    from jitort.kernels import _cache
    root, kroot = cache_dir(), _cache.cache_root()
    if args.action == "clear":
        shutil.rmtree(root, ignore_errors=True)
        print(f"removed {root}")
        return 0
    current = {_cache.folder(m) for m in _cache.modules()}
    # kernel folders of other sources (an earlier edit, another numba), and the one-folder
    # layout of earlier jitort versions (kernels-<hash>)
    stale = [d for d in sorted((kroot / "kernels").glob("*-*")) if d.name not in current]
    stale += sorted({*root.glob("kernels-*"), *kroot.glob("kernels-*")})
    stale += [d for d in sorted(root.glob("gen-*")) if d.name != f"gen-{gen_hash()}"]
    if args.action == "prune":
        for d in stale:
            shutil.rmtree(d, ignore_errors=True)
            print(f"removed {d}")
        print(f"{len(stale)} stale folders removed")
        return 0
    print(f"{root} (generated code: gen-{gen_hash()})")
    total = 0
    for d in sorted(root.glob("gen-*")):
        size, nbc = _size(d)
        total += size
        mods = sum(1 for f in d.rglob("*.py") if f.name != "__init__.py")
        mark = "  (stale)" if d in stale else "  (current)"
        print(f"  {d.name}: {mods} generated modules, {nbc} compiled functions, "
              f"{size / 1e6:.1f} MB{mark}")
    print(f"kernel library: {kroot / 'kernels'}")
    here = [kroot / "kernels" / n for n in sorted(current)]
    sizes = [_size(d) for d in here if d.is_dir()]
    size, nbc = sum(s for s, _ in sizes), sum(n for _, n in sizes)
    total += size
    print(f"  {len(sizes)} of {len(here)} kernel modules have compiled code: {nbc} compiled "
          f"functions, {size / 1e6:.1f} MB (current)")
    for d in stale:
        if d.name.startswith("gen-"):
            continue
        size, nbc = _size(d)
        total += size
        print(f"  {d.name}: {nbc} compiled functions, {size / 1e6:.1f} MB  (stale: other "
              "kernel sources, numba or python)")
    if stale:
        print(f"  `jitort cache prune` removes the {len(stale)} stale folders")
    print(f"  total {total / 1e6:.1f} MB")
    return 0


# --- batch -------------------------------------------------------------------------------------

def cmd_batch(args) -> int:
    """Parquet rows through the model into a Parquet folder (jitort/apps/batch.py)."""
    from jitort.apps import batch
    from jitort.errors import JitortError
    try:
        r = batch.run(args.model, args.input, args.output, engine=args.engine,
                      workers=args.workers, batch_size=args.batch_size,
                      threads_per_worker=args.threads_per_worker, on_error=args.on_error)
    except (JitortError, ValueError) as e:
        print(f"jitort batch: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    skipped = (f", {r.errors} skipped ({r.output / batch.ERRORS_FILE})"
               if args.on_error == "skip" else "")
    workers = f", {r.workers} workers" if r.engine == "ray" else ""
    print(f"{r.rows} rows in {r.seconds:.1f} s ({r.rows_per_s:.1f} rows/s; "
          f"{r.steady_rows_per_s:.1f} rows/s after the first result), engine {r.engine}"
          f"{workers}: {r.written} written to {r.output}{skipped}")
    return 0


# --- main --------------------------------------------------------------------------------------

def _shape_option(s, help_text: str) -> None:
    s.add_argument("--shape", action="append", default=[], metavar="NAME=DIMS", help=help_text)


def _add_bench(sub) -> None:
    b = sub.add_parser("bench", help="jitort vs onnxruntime latency")
    b.add_argument("models", nargs="*")
    b.add_argument("--repeat", type=int, default=20)
    b.add_argument("--threads", type=int, default=None)
    b.set_defaults(fn=cmd_bench)


def _add_run_and_explain(sub) -> None:
    for name, fn, helptext in (("run", cmd_run, "run once, print output summaries"),
                               ("explain", cmd_explain, "passes, fusion, fallbacks, memory, "
                                                        "per-kernel FLOPs and GFLOP/s")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("model")
        s.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
        _shape_option(s, "shape of an input without --input, e.g. input_ids=1x128")
        s.add_argument("--threads", type=int, default=None)
        s.set_defaults(fn=fn)
        if name == "run":
            s.add_argument("--profile", metavar="TRACE.json", default=None,
                           help="profile per kernel and write a Chrome trace (Perfetto)")
        else:
            s.add_argument("--repeat", type=int, default=10, help="timed runs after the first")
            s.add_argument("--trace", metavar="TRACE.json", default=None,
                           help="also write the Chrome trace of the timed runs")


def _add_warmup(sub) -> None:
    w = sub.add_parser("warmup", help="compile models into the on-disk cache")
    w.add_argument("models", nargs="*")
    _shape_option(w, "declared input shape (repeat a name for several shapes)")
    w.add_argument("--jobs", "-j", type=int, default=None,
                   help="parallel processes: models (default 1), or with --library library "
                        "entries (default: the CPUs)")
    w.add_argument("--library", action="store_true",
                   help="compile the kernel library's entries (jitort/library_signatures.txt "
                        "and the cache's call-site records) instead of models")
    w.add_argument("--only", action="append", default=[], metavar="KERNEL",
                   help="with --library: only kernels whose module.name contains this "
                        "(repeatable, or comma-separated), e.g. --only conv_transpose")
    w.add_argument("--threads", type=int, default=None)
    w.add_argument("--quiet", "-q", action="store_true", help="no progress bars")
    w.add_argument("--no-tune", action="store_true",
                   help="skip the calibration of implementation choices (jitort tune)")
    w.set_defaults(fn=cmd_warmup)


def _add_tune(sub) -> None:
    t = sub.add_parser("tune", help="measure implementation choices on this machine and keep "
                       "the decisions (beside the kernel cache)")
    t.add_argument("--show", action="store_true", help="print the decisions and exit")
    t.add_argument("--only", action="append", default=[], metavar="CHOICE",
                   help="calibrate only this choice (repeatable, or comma-separated)")
    t.add_argument("--budget", type=float, default=55.0,
                   help="seconds of measurement at most (default 55); buckets not reached "
                        "keep their previous decision or the default rule")
    t.add_argument("--quiet", "-q", action="store_true", help="no progress bar or report")
    t.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="the choices of this CPU (default) or of this GPU (cuda)")
    t.add_argument("--background", action="store_true", help=argparse.SUPPRESS)
    t.set_defaults(fn=cmd_tune)


def _add_memory(sub) -> None:
    m = sub.add_parser("memory", help="memory plan report and PNG (tensors over step x offset)")
    m.add_argument("model")
    _shape_option(m, "input shape, e.g. input_ids=1x128 (the largest plan is drawn)")
    m.add_argument("--png", default=None, help="output path (default: MODEL-plan.png)")
    m.set_defaults(fn=cmd_memory)


def _add_batch(sub) -> None:
    bt = sub.add_parser("batch", help="run the model over a Parquet dataset (one row per sample)")
    bt.add_argument("model")
    bt.add_argument("--input", required=True, help="Parquet file or folder; columns named after "
                    "the model's inputs")
    bt.add_argument("--output", required=True, help="folder for the output Parquet files")
    bt.add_argument("--engine", choices=["local", "ray"], default="local",
                    help="local: this process, no Ray (default); ray: Ray Data actors on a "
                         "local Ray, or the cluster at RAY_ADDRESS")
    bt.add_argument("--workers", type=int, default=None,
                    help="Ray actors (default: the cluster's CPUs // threads per worker)")
    bt.add_argument("--batch-size", type=int, default=256, help="rows per model call")
    bt.add_argument("--threads-per-worker", type=int, default=None,
                    help="threads of each worker (default: ray 1, local all cores)")
    bt.add_argument("--on-error", choices=["raise", "skip"], default="raise",
                    help="a bad row: stop with an error naming it, or record it in "
                         "OUTPUT/_errors.jsonl and go on")
    bt.set_defaults(fn=cmd_batch)


def _add_cache(sub) -> None:
    c = sub.add_parser("cache", help="the on-disk cache of generated code and kernels")
    c.add_argument("action", choices=["info", "prune", "clear"],
                   help="info: what is cached; prune: remove the folders of other kernel "
                        "sources or versions; clear: remove the generated code")
    c.set_defaults(fn=cmd_cache)


def build_parser() -> argparse.ArgumentParser:
    """The ``jitort`` argument parser: one sub-command per ``cmd_*`` function above."""
    p = argparse.ArgumentParser(prog="jitort", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="count", default=0, help="-v INFO, -vv DEBUG logging")
    sub = p.add_subparsers(dest="cmd", required=True)
    for add in (_add_bench, _add_run_and_explain, _add_warmup, _add_tune, _add_memory,
                _add_batch, _add_cache):
        add(sub)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.verbose:
        logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
        log.setLevel(logging.DEBUG if args.verbose > 1 else logging.INFO)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
