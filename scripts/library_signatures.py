#!/usr/bin/env python
"""Regenerate jitort/library_signatures.txt: the kernel-library entries the code generator emits.

    python scripts/library_signatures.py [MODEL.onnx ...] [--cache DIR ...] [--output PATH]
                                         [--allow-failures]

For each model (default: the ten models of ../shared/models, or $JITORT_MODEL_DIR, and the nine
onnx light models) it compiles the model, plans its drivers for the default inputs (symbolic
dims 1 for the first, 128 for the others) and types each driver function without compiling any
kernel (``jitort.codegen.native.infer_records``), collecting the (kernel, argument types) of
every library call site. The call-site records
(``*.sigs``) found in jitort's cache (``--cache``, default the current ``JITORT_CACHE_DIR``) are
merged in (as today's ``native_call`` would call them; kernels committed to git only). Runs in a
throwaway ``JITORT_CACHE_DIR``/``NUMBA_CACHE_DIR`` unless they are set. A model that fails to
plan leaves the list unwritten (exit status 1) unless ``--allow-failures``: its kernels would
silently drop out of the library.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def default_models() -> list[str]:
    import onnx
    shared = Path(os.environ.get("JITORT_MODEL_DIR", ROOT.parent / "shared" / "models"))
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return sorted(str(p) for p in shared.glob("*.onnx")) + sorted(
        str(p) for p in light.glob("light_*.onnx"))


def model_entries(path: str, feeds: dict | None = None) -> set:
    import jitort
    from jitort import library, tiering
    from jitort.apps.cli import feeds_for as _feeds_for
    from jitort.codegen import native
    cm = jitort.compile(path, tiered=False)
    if feeds is None:
        feeds = _feeds_for(cm, [])
    found = set()
    for mod, part, sig in tiering.driver_parts(cm, feeds):
        for rec in native.infer_records(mod, part, sig).values():
            e = library.from_record(*rec)
            if e is not None:
                found.add(e)
    return found


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("models", nargs="*")
    ap.add_argument("--cache", action="append", default=None, metavar="DIR",
                    help="jitort cache folders whose *.sigs records to merge (repeatable)")
    ap.add_argument("--output", default=None, help="default: jitort/library_signatures.txt")
    ap.add_argument("--allow-failures", action="store_true",
                    help="write the list even if some models fail to plan")
    a = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="jitort-sigs-")
    caches = a.cache if a.cache is not None else [os.environ.get("JITORT_CACHE_DIR")
                                                   or str(Path.home() / ".cache" / "jitort")]
    os.environ.setdefault("JITORT_CACHE_DIR", f"{tmp}/jitort")
    os.environ.setdefault("NUMBA_CACHE_DIR", f"{tmp}/numba")
    os.environ["JITORT_TIERED"] = "0"
    from jitort import library
    warnings.simplefilter("ignore")
    found: set = set()
    failed: list[str] = []
    jobs = [(m, None) for m in (a.models or default_models())]
    t0 = time.perf_counter()
    for k, (path, feeds) in enumerate(jobs):
        try:
            new = model_entries(path, feeds) - found
        except Exception as e:  # a model jitort cannot plan: its kernels are not emitted
            print(f"[{k + 1}/{len(jobs)}] {path}: FAILED ({type(e).__name__}: {e})", flush=True)
            failed.append(Path(path).name)
            continue
        found |= new
        print(f"[{k + 1}/{len(jobs)}] {Path(path).name}: "
              f"{len(new)} new entries ({len(found)} in all, {time.perf_counter() - t0:.0f} s)",
              flush=True)
    if failed and not a.allow_failures:
        # a list written without them would drop their kernels from the library (a planning
        # bug in light_shufflenet once dropped conv_group._core that way)
        print(f"not written: {len(failed)} model(s) failed to plan ({', '.join(failed)}); "
              "fix them, or pass --allow-failures", flush=True)
        return 1
    for c in caches:  # records as today's code generator would emit them
        found |= set(library.cache_entries(c, normalize=True))
    # kernels committed to the repo only (work in progress in the checkout may emit others)
    tracked = set(subprocess.run(["git", "ls-files", "kernels/cpu"], cwd=ROOT,
                                 capture_output=True, text=True).stdout.split())
    found = {e for e in found if f"kernels/cpu/{e.module}.py" in tracked}
    out = Path(a.output) if a.output else library.LIST_PATH
    header = ("Kernel-library entries the code generator emits (kernel, argument types): what\n"
              "`jitort warmup --library` compiles. Generated by scripts/library_signatures.py;\n"
              "do not edit.\n"
              f"{len(found)} entries, {len({e.kernel for e in found})} kernels.")
    library.write_list(found, out, header)
    print(f"wrote {out}: {len(found)} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
