"""Differential fuzzing campaign: random small graphs, jitort vs onnxruntime / onnx.reference.

    python scripts/fuzz.py --examples 1000 [--seed N] [--debug] [--stop]
                           [--tier compiled|interpreter|cuda] [--only STRUCTURE ...]

Prints the number of graphs checked, what they were compared against, and every mismatch
(with a description of the graph to reproduce it). Exit status 1 if any graph disagreed.
``--tier``: the compiled program (default), tier 0 (the interpreter a tiered model's first
calls run) or the CUDA backend (Numba's CUDA simulator unless ``NUMBA_ENABLE_CUDASIM=0``, on a
GPU). The generator lives in tests/test_fuzz.py (CI runs a small derandomized budget of it).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: random)")
    ap.add_argument("--debug", action="store_true", help="compile with bounds checking")
    ap.add_argument("--stop", action="store_true", help="stop at the first mismatch and shrink it")
    ap.add_argument("--tier", choices=("compiled", "interpreter", "cuda"), default="compiled")
    ap.add_argument("--only", nargs="+", metavar="STRUCTURE",
                    help="draw from these structures of tests/test_fuzz.py only "
                         "(elementwise, quantized, ...)")
    args = ap.parse_args()
    if args.tier == "cuda":
        os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # before numba loads
    import jitort  # noqa: F401  (environment defaults before numpy/numba load)
    from tests import test_fuzz
    by_name = {f.__name__: f for f in test_fuzz.STRUCTURES}
    unknown = sorted(set(args.only or ()) - set(by_name))
    if unknown:
        ap.error(f"no structure {', '.join(unknown)}; there are {', '.join(by_name)}")
    failures: list[str] = []
    t0 = time.monotonic()

    def progress(stats):
        n = stats["examples"]
        if n % 50 == 0:
            print(f"  {n} graphs, {stats['failed']} mismatches, {time.monotonic() - t0:.0f} s",
                  flush=True)

    stats = test_fuzz.run_campaign(args.examples, seed=args.seed, debug=args.debug,
                         failures=None if args.stop else failures, on_example=progress,
                         tier=args.tier,
                         structures=[by_name[n] for n in args.only] if args.only else None)
    for i, f in enumerate(failures):
        print(f"--- mismatch {i + 1} ---\n{f}\n")
    refs = ", ".join(f"{k}: {v}" for k, v in sorted(stats.items()) if k not in ("examples", "failed"))
    print(f"fuzz ({args.tier}): {stats['examples']} graphs checked in "
          f"{time.monotonic() - t0:.0f} s ({refs}); {len(failures)} mismatches "
          f"-> {'FAIL' if failures else 'OK'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
