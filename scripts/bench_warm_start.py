#!/usr/bin/env python
"""Start-up of a fresh process: ``import jitort``, and the first compiled result on warm caches.

    python scripts/bench_warm_start.py [MODEL.onnx] [--repeat N] [--fresh-caches] [--profile N]

Every figure comes from a new Python process, ``--repeat`` times (min and median shown):

    interpreter   a child that imports nothing: Python's own start, from the parent's spawn
    import        ``import jitort`` alone, timed inside the child
    first result  inside the child, from before ``import jitort`` to the first output of the
                  compiled program (``jitort.compile(model, tiered=False)`` and one call), split
                  into import / compile / first call; "since launch" adds the interpreter's
                  start (from the parent's spawn)

The path measured is the warm-start snapshot (jitort/warm.py): the unmeasured first child's
compiled call writes it, and ``jitort.compile`` in each measured child returns a ``WarmModel``
that runs the snapshot's plan (compile: the key and the snapshot read; first call: loading the
generated driver and its kernels from Numba's caches, and the call). The report says which
class each measured child got and which heavy modules it imported (onnx, the compiler
``jitort.runtime``, ``scipy.linalg``); a child off the snapshot path fails the run.

Warm caches: one unmeasured child runs first, so that the generated code and Numba's compiled
kernels are in the on-disk caches; the measured children then find them (each reports how many
functions Numba compiled: 0 on warm caches). By default the caches are the ones the environment
names (``JITORT_CACHE_DIR``, ``NUMBA_CACHE_DIR``, else ``~/.cache/jitort``); ``--fresh-caches``
points both at a new temporary folder, so that the unmeasured run is a cold compile (minutes),
reported as such. ``--profile N`` runs one more warm child under cProfile (processor time) and
prints its N most expensive functions by cumulative time.

"CPU time" is the child's processor time (all its threads) over the first result: on a busy
machine, where the wall times stretch, it stays close to what an idle machine's wall time is.

Default model: bert from ../shared/models (``JITORT_MODEL_DIR``), B=1, S=128. The CPU's model
name is printed beside the figures. Bars (issue 43): ``import jitort`` <= 0.3 s and the first
result <= 1.0 s (medians, inside the child); the exit status is 1 when one is missed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMPORT_BAR_S = 0.3
FIRST_RESULT_BAR_S = 1.0

# argv: model, launch time (time.time() in the parent), mode: "none" | "import" | "first"
CHILD = r"""
import sys, time
t0, c0 = time.perf_counter(), time.process_time()
mode = sys.argv[3]
r = {}
untimed = 0.0  # making the feeds: not start-up
if mode != "none":
    import jitort
    t1 = time.perf_counter()
    r["import"] = t1 - t0
if mode == "first":
    import numpy as np
    cm = jitort.compile(sys.argv[1], tiered=False)  # the compiled program, not the first tier
    t2, c2 = time.perf_counter(), time.process_time()
    from jitort.apps.cli import feeds_for  # B=1, other symbolic dims 128, random values
    feeds = feeds_for(cm, [])
    t3, c3 = time.perf_counter(), time.process_time()
    out = cm.run(None, feeds)
    t4 = time.perf_counter()
    untimed = t3 - t2
    r.update(compile=t2 - t1, first_call=t4 - t3, total=(t4 - t0) - untimed,
             cpu=time.process_time() - c0 - (c3 - c2),
             compiles=jitort.compile_count(),
             checksum=float(out[0].astype(np.float64).sum()), cls=type(cm).__name__,
             loaded=[m for m in ("onnx", "jitort.runtime", "scipy.linalg") if m in sys.modules])
r["since_launch"] = time.time() - float(sys.argv[2]) - untimed
import json
print("RESULT " + json.dumps(r))
"""


def run_child(model: str, mode: str, env: dict, profile: Path | None = None) -> dict:
    code = CHILD
    if profile:  # processor time, not wall time: a busy machine shows the same costs
        code = ("import cProfile, time\n_prof = cProfile.Profile(time.process_time)\n"
                f"_prof.enable()\nexec({CHILD!r})\n_prof.disable()\n"
                f"_prof.dump_stats({str(profile)!r})\n")
    cmd = [sys.executable, "-c", code, model, repr(time.time()), mode]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"child ({mode}) failed with exit code {p.returncode}")
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def stats(values: list[float]) -> str:
    return f"min {min(values):6.3f} s  median {statistics.median(values):6.3f} s"


def measure(model: str, env: dict, repeat: int) -> dict[str, list]:
    """``repeat`` rounds of the three children, interleaved so that a disturbance of the
    machine spreads over all the figures instead of one."""
    runs: dict[str, list] = {"none": [], "import": [], "first": []}
    for _ in range(repeat):
        for mode in runs:
            runs[mode].append(run_child(model, mode, env))
    return runs


def report(runs: dict[str, list], cpu: str) -> bool:
    first = runs["first"]
    rows = [("interpreter (since launch)", [r["since_launch"] for r in runs["none"]]),
            ("import jitort", [r["import"] for r in runs["import"]]),
            ("import jitort (since launch)", [r["since_launch"] for r in runs["import"]]),
            ("first result", [r["total"] for r in first]),
            ("  of which import", [r["import"] for r in first]),
            ("  of which compile()", [r["compile"] for r in first]),
            ("  of which first call", [r["first_call"] for r in first]),
            ("first result (since launch)", [r["since_launch"] for r in first]),
            ("first result, CPU time", [r["cpu"] for r in first])]
    print(f"CPU: {cpu}; {len(first)} processes per figure")
    for name, values in rows:
        print(f"  {name:<30}{stats(values)}")
    compiled = sorted({r["compiles"] for r in first})
    same = len({round(r["checksum"], 3) for r in first}) == 1
    # generated code and kernels load from the caches; functions Numba compiles anyway in every
    # process (not cached by design or by mistake) count here too
    print(f"  Numba compilations per measured process: {compiled}; same outputs: {same}")
    classes = sorted({r["cls"] for r in first})
    loaded = sorted({m for r in first for m in r["loaded"]})
    snapshot = classes == ["WarmModel"]
    print(f"  model class per measured process: {', '.join(classes)} "
          f"({'the warm-start snapshot' if snapshot else 'NOT the snapshot path'}); "
          f"heavy modules imported: {', '.join(loaded) or 'none'} (of onnx, jitort.runtime, "
          "scipy.linalg)")
    imp = statistics.median(r["import"] for r in runs["import"])
    res = statistics.median(r["total"] for r in first)
    ok = imp <= IMPORT_BAR_S and res <= FIRST_RESULT_BAR_S and same and snapshot
    print(f"{'PASS' if ok else 'FAIL'} (bars: import jitort <= {IMPORT_BAR_S} s, first "
          f"compiled result <= {FIRST_RESULT_BAR_S} s, medians, on the snapshot path, on {cpu})")
    print(f"  import jitort median {imp:.3f} s; first compiled result median {res:.3f} s")
    return ok


def print_profile(model: str, env: dict, top: int, tmp: Path) -> None:
    import pstats
    out = tmp / "warm_first.prof"
    run_child(model, "first", env, profile=out)
    print(f"\ncProfile of one warm child (processor time, cumulative, top {top}):")
    pstats.Stats(str(out)).sort_stats("cumulative").print_stats(top)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?",
                    default=str(Path(os.environ.get("JITORT_MODEL_DIR",
                                                    ROOT.parent / "shared" / "models"))
                                / "bert.onnx"))
    ap.add_argument("--repeat", type=int, default=5, help="processes per figure (default 5)")
    ap.add_argument("--fresh-caches", action="store_true",
                    help="new temporary caches: the unmeasured first run compiles everything")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="also profile one warm child and print its top N functions")
    args = ap.parse_args(argv)
    if not Path(args.model).exists():
        raise SystemExit(f"model not found: {args.model}")
    sys.path.insert(0, str(ROOT))
    from jitort.profiling import cpu_name
    cpu = cpu_name()

    with tempfile.TemporaryDirectory(prefix="jitort-start-") as tmp:
        env = dict(os.environ)
        if args.fresh_caches:
            env["JITORT_CACHE_DIR"] = str(Path(tmp) / "jitort")
            env["NUMBA_CACHE_DIR"] = str(Path(tmp) / "numba")
        print(f"model {args.model}\ncaches "
              f"{env.get('JITORT_CACHE_DIR', '~/.cache/jitort (default)')}")
        t = time.perf_counter()
        warm = run_child(args.model, "first", env)
        print(f"unmeasured first run (warms the caches, writes the snapshot): "
              f"{time.perf_counter() - t:.2f} s, {warm['compiles']} Numba compilations, "
              f"{warm['cls']}", flush=True)
        ok = report(measure(args.model, env, args.repeat), cpu)
        if args.profile:
            print_profile(args.model, env, args.profile, Path(tmp))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
