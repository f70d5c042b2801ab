"""Time op-suite cases with jitort's code compiled for several LLVM CPU targets on this host.

    python scripts/compare_targets.py                       # the default cases and targets
    python scripts/compare_targets.py --targets skylake-avx512,znver4 --cases "conv dw 3x3 c128 56x56"

Each target runs ``benchmarks/test_bench_ops.py`` in a fresh process with
``NUMBA_CPU_NAME=<target>`` and empty Numba / jitort caches, so every kernel is compiled
with that target's tuning (scheduling model, preferred vector width) while it runs on this
CPU. A kernel whose time depends on the tuning -- the float32 gemm's tile spilled its
accumulators under Intel tunings -- shows as a column far from the host's. Targets must be
ones this CPU can execute (their features a subset of its own): an AVX-512 host runs every
AVX-512 and AVX2 target, an AVX2 host only the AVX2 ones. One thread by default
(``JITORT_BENCH_THREADS``), jitort's median per case, onnxruntime's for scale.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import llvmlite.binding as llb

ROOT = Path(__file__).resolve().parents[1]
CASES = ("matmul 128x256@256x1024;gemm transB 128x256@(1024x256)^T+c;conv 3x3 64->64 56x56;"
         "conv dw 3x3 c128 56x56;convsweep dense 3x3/2 128->256 28x28;"
         "convsweep depthwise 3x3/1 144->144 56x56;convsweep depthwise 5x5/2 240->240 28x28;"
         "convsweep grouped 8/group 3x3/1 256->256 28x28;transpose nchw->nhwc 1x96x56x56;"
         "qlinearconv u8s8 3x3 64->64 56x56;matmulinteger u8s8 128x256@256x1024;"
         "lstm T=64 B=1 256->256;gru T=128 B=1 256->256;conv 7x7/2 3->64 224x224")
AVX512 = ("skylake-avx512", "icelake-server", "sapphirerapids", "znver4")
AVX2 = ("haswell", "znver3")


def run(target: str, cases: str, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, NUMBA_CACHE_DIR=f"{tmp}/numba", JITORT_CACHE_DIR=f"{tmp}/gen",
                   JITORT_KERNEL_CACHE_DIR=f"{tmp}/kernels", JITORT_BENCH_THREADS=str(threads),
                   JITORT_TUNE="0")
        if target != "host":
            env["NUMBA_CPU_NAME"] = target
        out = Path(tmp) / "bench.json"
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        *[f"benchmarks/test_bench_ops.py::test_op[{c}]" for c in cases.split(";")],
                        "--benchmark-only", f"--benchmark-json={out}"], cwd=ROOT, env=env,
                       check=True, stdout=subprocess.DEVNULL)
        data = json.loads(out.read_text())
    return {b["group"]: (b["stats"]["median"], b["extra_info"].get("ort_median_s"))
            for b in data["benchmarks"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", help="comma-separated LLVM CPU names (default: the AVX-512 "
                    "and AVX2 ones this CPU can run, and the host's own)")
    ap.add_argument("--cases", default=CASES, help="op-suite case names, ';'-separated")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    feats = llb.get_host_cpu_features()
    if args.targets:
        targets = args.targets.split(",")
    else:
        targets = ["host"] + (list(AVX512) if feats.get("avx512f") else []) + list(AVX2)
    print(f"host: {llb.get_host_cpu_name()}, {args.threads} thread(s)", flush=True)
    results = {}
    for t in targets:
        results[t] = run(t, args.cases, args.threads)
        print(f"  {t}: {len(results[t])} cases", flush=True)
    cases = sorted(set().union(*results.values()))
    print(f"\n{'case':<48}" + "".join(f"{t:>16}" for t in targets) + f"{'onnxruntime':>14}")
    for c in cases:
        base = results[targets[0]].get(c, (None,))[0]
        cells = []
        for t in targets:
            med = results[t].get(c, (None,))[0]
            cells.append(f"{med * 1e6:9.1f} ({med / base:4.2f})" if med and base else f"{'-':>16}")
        ort = next((results[t][c][1] for t in targets if c in results[t] and results[t][c][1]),
                   None)
        print(f"{c[:47]:<48}" + "".join(f"{x:>16}" for x in cells)
              + (f"{ort * 1e6:12.1f}us" if ort else ""))
    print("\n(us, jitort's median; in brackets the ratio to the first target's)")


if __name__ == "__main__":
    main()
