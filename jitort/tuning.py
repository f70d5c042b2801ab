"""Per-machine calibration: where several implementations apply, measure them on this machine.

A place in the compiler that chooses between implementations is a :class:`Choice`: a table of
:class:`Candidate` s, each with an applicability rule (shape, dtype, ISA) and a way to time it
on a representative problem, a map from a problem to its *shape bucket*, the grid of buckets
``jitort tune`` measures, and the *default rule* (the shape rule measured where the code was
written) that decides before calibration and wherever a bucket was not measured (a choice whose
grid covers part of its buckets may first let a bucket follow its nearest measured neighbours:
``Choice.place``, :func:`nearest_pick`). Nothing is keyed by a model or a layer: only by shape
buckets.

Decisions (per bucket the fastest candidate, or the default rule's pick where it is within
:data:`KEEP_DEFAULT` of it, with every candidate's time) are persisted as
JSON under ``<kernel cache root>/tuning/`` (``kernels._cache.cache_root``), one file per
machine: the file name and its header carry the machine's identity (CPU vendor and model,
LLVM's name for it and its ISA features, core count, the BLAS the kernels call) and each
choice's entry the hash of the kernel sources it measured. A file that cannot be parsed, or
whose identity is another machine's, is ignored with a :class:`TuningWarning`; an entry
measured on other kernel sources is dropped. ``jitort tune`` calibrates (bounded time, a
progress bar), ``jitort tune --show`` prints the decisions; on first use without decisions a
compile starts ``jitort tune --background`` in a detached, low-priority process (never
blocking a call; ``JITORT_TUNE=0`` turns both the background run and the use of decisions
off, which the test suite does for reproducible code).

Choices of device ``cuda`` (``jitort.tuning_cuda``: the CUDA launchers') are measured per GPU
(``jitort tune --device cuda``) into a file of their own, named by the GPU's identity; a CPU's
``jitort tune`` leaves them alone.

Safety net: a candidate that took more than :data:`DEMOTE` times the best candidate's time in
most of the buckets where both ran (at least :data:`DEMOTE_MIN_BUCKETS` of them, tiny ones
left out) is *demoted* for the whole choice -- the default rule no
longer picks it in buckets that were not measured -- and ``--show`` / ``jitort explain`` say so.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import json
import logging
import math
import os
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import options

log = logging.getLogger("jitort.tuning")

#: a candidate this many times slower than the best in most measured buckets is demoted
DEMOTE = 1.5
#: a bucket not measured follows measured buckets of its kind at most this far (the sum of
#: class steps over its coordinates; ``Choice.place``)
NEAREST_MAX = 2
#: a bucket keeps the default rule's pick unless another candidate is faster by this factor:
#: a near-tie measured on one node (timer noise, a loaded machine) is no reason to leave the
#: rule, and in a whole model the tie may go the other way
KEEP_DEFAULT = 1.05
FORMAT = 1


class TuningWarning(UserWarning):
    """A decision file was ignored (corrupt, another machine's) or calibration failed."""


@dataclass(frozen=True)
class Candidate:
    """One implementation of a choice: ``applies(problem)`` says whether it can run the
    problem; ``prepare(problem)`` returns a no-argument callable that runs it once (operands
    allocated, constants packed, code compiled beforehand), which calibration times."""
    name: str
    applies: Callable[[dict], bool]
    prepare: Callable[[dict], Callable[[], object]]


@dataclass(frozen=True)
class Choice:
    """A place that chooses between implementations (see the module docstring)."""
    name: str
    doc: str
    candidates: tuple
    bucket: Callable[[dict], tuple]          # problem -> bucket key (a tuple of ints)
    grid: Callable[[], list]                 # the buckets ``jitort tune`` measures
    problem: Callable[[tuple], dict]         # a bucket's representative problem
    default: Callable[[dict], str]           # today's shape rule: problem -> candidate name
    modules: tuple = ()                      # kernel modules the candidates run (their hash)
    work: Callable[[dict], float] = field(default=lambda p: 0.0)  # flops, for GFLOP/s
    #: for a choice compiled kernels make at run time: ``apply(decisions)`` writes its picks
    #: (``choose`` over its grid) where the kernels read them (``kernels.cpu.tunables``)
    apply: Callable[[dict], None] | None = None
    #: where its candidates run: ``cpu`` (decisions per CPU) or ``cuda`` (per GPU: its own file,
    #: ``jitort tune --device cuda``)
    device: str = "cpu"
    #: for a choice whose grid measures some of its buckets: ``place(key) -> (kind, position)``,
    #: a bucket's kind (buckets of different kinds are never compared) and its position, a
    #: tuple of class indices; a bucket not measured then follows its nearest measured
    #: neighbours of its kind (``nearest_pick``) before the default rule
    place: Callable[[tuple], tuple] | None = None

    def candidate(self, name: str) -> Candidate:
        return next(c for c in self.candidates if c.name == name)


CHOICES: dict[str, Choice] = {}
#: the modules defining the choices (they register them on import and build on this module, so
#: they are imported by name on first use rather than here): deep learning's, classical ML's,
#: the CUDA launchers'
_TABLE_MODULES = ("jitort.tuning_choices", "jitort.tuning_ml", "jitort.tuning_cuda")


def choices(device: str | None = None) -> dict[str, Choice]:
    """The registered choices, by name (the table modules imported on first use); those whose
    candidates run on ``device`` when it is given."""
    for name in _TABLE_MODULES:
        if name not in sys.modules:
            importlib.import_module(name)
    if device is None:
        return CHOICES
    return {name: c for name, c in CHOICES.items() if c.device == device}


def register(choice: Choice) -> Choice:
    CHOICES[choice.name] = choice
    return choice


# --- machine identity and the decision file --------------------------------------------------

@functools.lru_cache(maxsize=None)
def _machine() -> dict:
    import llvmlite.binding as llb
    from .kernels.cpu import blas
    from .profiling import cpu_name
    feats = llb.get_host_cpu_features()
    isa = sorted(k for k, v in feats.items() if v)
    return {"vendor": blas.cpu_vendor() or "unknown", "model": cpu_name(),
            "llvm_cpu": os.environ.get("NUMBA_CPU_NAME") or llb.get_host_cpu_name(),
            "isa": hashlib.sha256(" ".join(isa).encode()).hexdigest()[:16],
            "avx512": bool(feats.get("avx512f")), "cores": os.cpu_count() or 1,
            "blas": f"{blas.BLAS} {blas.CORE}".strip()}


def _gpu() -> dict | None:
    """The GPU the CUDA choices run on (``kernels.cuda.tunables.gpu_identity``: name, compute
    capability, multiprocessors, memory, driver, cuBLAS, TF32), or None where numba's CUDA
    target cannot run; once per process."""
    if "gpu" not in _gpu_memo:
        from .kernels.cuda.tunables import gpu_identity
        _gpu_memo["gpu"] = gpu_identity()
    return _gpu_memo["gpu"]


_gpu_memo: dict = {}


def measurable_gpu() -> bool:
    """Whether a real GPU is here: the CUDA choices are measured on one, never on the
    simulator (whose timings would decide nothing a GPU could use)."""
    return "sms" in (_gpu() or {})


def machine(device: str = "cpu") -> dict:
    """This machine's identity as calibration sees it (decisions measured under another one
    are not applied); computed once per process: every lowering decision asks for it. For
    ``device="cuda"``: the GPU's (:func:`_gpu`), an empty dict where there is none."""
    if device == "cuda":
        return dict(_gpu() or {})
    return dict(_machine())


def machine_key(ident: dict | None = None) -> str:
    ident = ident or machine()
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def decisions_dir() -> Path:
    from .kernels._cache import cache_root
    return cache_root() / "tuning"


def decisions_path(device: str = "cpu") -> Path:
    """The decision file of this CPU, or of this GPU (``device="cuda"``)."""
    if device == "cuda":
        return decisions_dir() / f"decisions-cuda-{machine_key(machine('cuda'))}.json"
    return decisions_dir() / f"decisions-{machine_key()}.json"


def library_hash(choice: Choice) -> str:
    """The hash of the kernel sources a choice's candidates run (decisions measured on other
    sources are dropped): its CPU kernel modules with what they import, or its CUDA ones."""
    if not choice.modules:
        return "-"
    if choice.device == "cuda":
        import numba
        from .kernels import cuda as cuda_kernels
        h = hashlib.sha256(f"numba {numba.__version__}".encode())
        for name in sorted(choice.modules):
            h.update(name.encode())
            h.update((Path(cuda_kernels.__file__).parent / f"{name}.py").read_bytes())
        return h.hexdigest()[:16]
    from .kernels._cache import modules_hash
    return modules_hash(list(choice.modules))


def enabled() -> bool:
    return options.read("tune")


_lock = threading.Lock()
_loaded: dict = {}   # device -> {"path", "stamp", "data"}: the file last read for it


def load(path: Path | None = None, device: str = "cpu") -> dict:
    """The decisions that apply on this machine (``device``: its CPU's, or its GPU's):
    ``{choice: entry}`` (entry: ``buckets`` -> {bucket text: {pick, times}}, ``demoted``). A
    corrupt file or another machine's is ignored with a :class:`TuningWarning`; entries
    measured on other kernel sources are dropped. Re-read when the file changes."""
    if device == "cuda" and path is None and _gpu() is None:
        return {}
    path = Path(path) if path is not None else decisions_path(device)
    try:
        st = path.stat()
    except OSError:
        return {}
    stamp = (st.st_mtime_ns, st.st_size)
    with _lock:
        seen = _loaded.get(device)
        if seen and seen["path"] == str(path) and seen["stamp"] == stamp:
            return seen["data"]
    data = _read(path, device)
    with _lock:
        _loaded[device] = {"path": str(path), "stamp": stamp, "data": data}
    return data


def _read(path: Path, device: str = "cpu") -> dict:
    def refuse(why: str) -> dict:
        warnings.warn(f"jitort: ignoring the calibration file {path}: {why}", TuningWarning,
                      stacklevel=4)
        return {}
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return refuse(f"cannot be read ({type(e).__name__}: {e})")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or \
            not isinstance(doc.get("choices"), dict):
        return refuse("not a jitort decision file of this version")
    here = machine(device)
    if doc.get("machine") != here:
        theirs = doc.get("machine") if isinstance(doc.get("machine"), dict) else {}
        return refuse(f"measured on another machine ({_describe(theirs, device)}; this one: "
                      f"{_describe(here, device)})")
    out = {}
    for name, entry in doc["choices"].items():
        choice = choices(device).get(name)
        if choice is None or not isinstance(entry, dict):
            continue
        if entry.get("library") != library_hash(choice):
            continue    # measured on other kernel sources: calibrate again
        if not isinstance(entry.get("buckets"), dict):
            return refuse(f"choice {name!r} has no bucket table")
        out[name] = entry
    return out


def _describe(ident: dict, device: str) -> str:
    if device == "cuda":
        return (f"{ident.get('gpu', '?')}, compute capability {ident.get('cc', '?')}, "
                f"cuBLAS {'through CuPy ' + str(ident['cublas']) if ident.get('cublas') else 'no'}"
                f", TF32 {'on' if ident.get('tf32') else 'off'}")
    return (f"{ident.get('model', '?')}, {ident.get('llvm_cpu', '?')}, "
            f"{ident.get('cores', '?')} cores, BLAS {ident.get('blas', '?')}")


def _bucket_text(key: tuple) -> str:
    return "x".join(str(int(k)) for k in key)


def _bucket_key(text: str) -> tuple:
    """The inverse of ``_bucket_text``."""
    return tuple(int(x) for x in text.split("x"))


def apply_runtime(device: str = "cpu") -> None:
    """Hand the decisions of the choices kernels make at run time to the kernels (cheap when
    nothing changed: ``load`` is cached by the file's stamp). Called by ``compile()`` (the
    CUDA choices' by a ``device="cuda"`` compile)."""
    if not enabled():
        return
    data = load(device=device)
    seen = _loaded.get(device)
    key = (seen["path"], seen["stamp"]) if data and seen else None
    if device in _applied and _applied[device] == key:
        return
    for choice in choices(device).values():
        if choice.apply is not None:
            choice.apply(data)
    _applied[device] = key


_applied: dict = {}


def choose(name: str, decisions: dict | None = None, **problem) -> str:
    """The candidate of choice ``name`` for ``problem``: the calibrated pick of its bucket
    when this machine measured it, else the default rule (unless it names a demoted
    candidate, then the first other applicable one). ``decisions``: instead of ``load()``."""
    choice = choices()[name]
    forced = _forced.get(name)
    if forced is not None and choice.candidate(forced).applies(problem):
        return forced
    if decisions is None:
        decisions = load(device=choice.device) if enabled() else {}
    entry = decisions.get(name)
    if entry:
        key = choice.bucket(problem)
        hit = entry["buckets"].get(_bucket_text(key))
        if hit and choice.candidate(hit["pick"]).applies(problem):
            return hit["pick"]
        near = nearest_pick(choice, entry, key, problem) if hit is None else None
        if near is not None:
            return near
    pick = choice.default(problem)
    demoted = set(entry.get("demoted", ())) if entry else set()
    if pick in demoted:
        others = [c.name for c in choice.candidates
                  if c.name not in demoted and c.applies(problem)]
        if others:
            return others[0]
    return pick


def nearest_pick(choice: Choice, entry: dict, key: tuple, problem: dict) -> str | None:
    """For a bucket this machine did not measure: the pick of the measured buckets of its kind
    nearest to it (at most :data:`NEAREST_MAX` class steps away) that can run ``problem``, the
    most frequent one; a tie goes to the default rule's pick when it is among the tied, else
    there is no answer (None: the default rule decides). The grid measures the layer classes
    networks are made of; a class between two measured ones that agree is more likely to
    behave as they measured on this machine than as the rule measured on another."""
    if choice.place is None:
        return None
    kind, pos = choice.place(key)
    best, picks = NEAREST_MAX + 1, []
    for text, hit in entry["buckets"].items():
        other_kind, other = choice.place(_bucket_key(text))
        if other_kind != kind or not choice.candidate(hit["pick"]).applies(problem):
            continue
        d = sum(abs(a - b) for a, b in zip(pos, other))
        if d < best:
            best, picks = d, [hit["pick"]]
        elif d == best:
            picks.append(hit["pick"])
    if not picks:
        return None
    top = max(picks.count(p) for p in picks)
    leaders = sorted({p for p in picks if picks.count(p) == top})
    if len(leaders) == 1:
        return leaders[0]
    default = choice.default(problem)
    return default if default in leaders else None


_forced: dict = {}


class force:
    """``with force(name, candidate):`` -- ``choose(name, ...)`` answers ``candidate`` wherever
    it applies (this process): calibration compiles a one-node model each way to time a
    choice the lowerings make. Not thread-safe; calibration runs one candidate at a time."""

    def __init__(self, name: str, candidate: str):
        choices()[name].candidate(candidate)      # a KeyError-like StopIteration on a typo
        self.name, self.candidate = name, candidate

    def __enter__(self):
        self.saved = _forced.get(self.name)
        _forced[self.name] = self.candidate
        return self

    def __exit__(self, *exc):
        if self.saved is None:
            _forced.pop(self.name, None)
        else:
            _forced[self.name] = self.saved
        return False


# --- measuring ------------------------------------------------------------------------------

def time_calls(fns: dict, min_time: float = 0.01, reps: int = 3) -> dict:
    """{name: seconds per call} of the no-argument callables ``fns``: the best of ``reps``
    blocks of at least ``min_time`` each, the callables' blocks alternating (so that a load
    that comes and goes -- the user's own work while a background calibration runs -- falls
    on all of them alike)."""
    calls = {}
    for name, fn in fns.items():
        fn()
        t0 = time.perf_counter()
        fn()
        calls[name] = max(1, int(min_time / max(time.perf_counter() - t0, 1e-7)))
    best = {name: math.inf for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            n = calls[name]
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / n)
    return best


def measure_bucket(choice: Choice, key: tuple, slow: dict | None = None) -> dict:
    """{candidate: seconds per call} of every applicable candidate on the bucket's problem
    (``time_calls``). ``slow`` multiplies a candidate's time (``JITORT_TUNE_SLOW=name:factor``:
    tests of the safety net and of calibration itself)."""
    prob = choice.problem(key)
    fns = {}
    for c in choice.candidates:
        if not c.applies(prob):
            continue
        try:  # prepared and run once: a candidate that fails here is not measured
            fn = c.prepare(prob)
            fn()
        except Exception as e:  # noqa: BLE001 - e.g. a GPU library refusing the problem
            log.warning("calibration: %s's candidate %s failed on %s: %s: %s", choice.name,
                        c.name, key, type(e).__name__, e)
            continue
        fns[c.name] = fn
    best = time_calls(fns)
    # a prepared callable may run its candidate ``reps`` times a call (GPU work: queued
    # back to back, waited for once)
    return {name: t / getattr(fns[name], "reps", 1) * (slow or {}).get(name, 1.0)
            for name, t in best.items()}


def _slow_factors() -> dict:
    return dict(options.read("tune_slow"))


#: buckets whose best time is under this are left out of the demotion vote (fixed costs,
#: timer noise), and a vote needs at least DEMOTE_MIN_BUCKETS buckets
DEMOTE_MIN_SECONDS = 20e-6
DEMOTE_MIN_BUCKETS = 4


def _demoted(buckets: dict) -> list:
    """Candidates above DEMOTE x the best time in most of the (not tiny) buckets where they
    ran."""
    slow, ran = {}, {}
    for b in buckets.values():
        best = min(b["times"].values())
        if best < DEMOTE_MIN_SECONDS:
            continue
        for c, t in b["times"].items():
            ran[c] = ran.get(c, 0) + 1
            slow[c] = slow.get(c, 0) + (t > DEMOTE * best)
    return sorted(c for c, n in ran.items() if n >= DEMOTE_MIN_BUCKETS and slow[c] * 2 > n)


def _pick(times: dict, default: str) -> str:
    """The fastest candidate, unless the default rule's is within KEEP_DEFAULT of it."""
    best = min(times, key=times.get)
    return default if times.get(default, math.inf) <= KEEP_DEFAULT * times[best] else best


def tune(only=None, budget_s: float = 55.0, progress=None, path: Path | None = None,
         device: str = "cpu") -> dict:
    """Measure every choice's grid (or the choices named in ``only``) of ``device`` (this
    CPU's, or this GPU's: ``cuda``) within about ``budget_s`` seconds and persist the
    decisions; returns the file's ``choices``. Buckets never measured go first, then those
    measured longest ago; buckets not reached in time keep their earlier decision, or the
    default rule, and the next run starts there."""
    import numba
    from tqdm import tqdm
    from .kernels.cpu import blas
    if device == "cuda" and _gpu() is None:
        raise RuntimeError("jitort tune --device cuda: no CUDA GPU here (numba's CUDA target "
                           "cannot run)")
    path = Path(path) if path is not None else decisions_path(device)
    slow = _slow_factors()
    todo = [c for c in choices(device).values() if not only or c.name in only]
    old = load(path, device) if path.exists() else {}
    doc_choices = {}
    deadline = time.monotonic() + budget_s
    total = sum(len(c.grid()) for c in todo)
    bar = tqdm(total=total, desc="jitort tune", unit="bucket",
               disable=(not sys.stderr.isatty()) if progress is None else not progress)
    prev_threads = numba.get_num_threads()
    numba.set_num_threads(1)        # decisions are per core: the kernels' BLAS runs 1 thread
    try:
        with blas.single_threaded():
            buckets = {c.name: {t: b for t, b in old.get(c.name, {}).get("buckets", {}).items()
                                if t in {_bucket_text(k) for k in c.grid()}} for c in todo}
            # buckets never measured first (in the choices' order: a later choice may run
            # through an earlier one's decisions), then the longest ago: runs cut short by
            # the budget add up to the whole grid
            work = []
            for ci, choice in enumerate(todo):
                for key in choice.grid():
                    b = buckets[choice.name].get(_bucket_text(key))
                    work.append(((b is not None, b.get("at", 0) if b else 0, ci), choice, key))
            work.sort(key=lambda w: w[0])
            cut = set()     # choices with a bucket never measured when the budget ran out
            for _, choice, key in work:
                bar.update(1)
                if time.monotonic() > deadline:
                    if _bucket_text(key) not in buckets[choice.name]:
                        cut.add(choice.name)
                    continue
                times = measure_bucket(choice, key, slow)
                if not times:
                    continue
                prob = choice.problem(key)
                buckets[choice.name][_bucket_text(key)] = {
                    "pick": _pick(times, choice.default(prob)), "times": times, "at": time.time(),
                    "gflops": {c: choice.work(prob) / t / 1e9 for c, t in times.items()}}
                if choice.apply is not None:   # later choices measure paths that use it
                    choice.apply({choice.name: {"buckets": buckets[choice.name]}})
            for choice in todo:
                doc_choices[choice.name] = {"library": library_hash(choice),
                                            "buckets": buckets[choice.name],
                                            "demoted": _demoted(buckets[choice.name]),
                                            "complete": choice.name not in cut}
    finally:
        numba.set_num_threads(prev_threads)
        bar.close()
    for name, entry in old.items():
        doc_choices.setdefault(name, entry)
    if progress is not False and time.monotonic() > deadline:
        left = sum(1 for _, c, k in work if _bucket_text(k) not in buckets[c.name])
        if left:
            print(f"jitort tune: the {budget_s:.0f} s budget ran out with {left} buckets never "
                  f"measured; run it again to go on", file=sys.stderr)
    doc = {"format": FORMAT, "machine": machine(device), "written": time.time(),
           "choices": doc_choices}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
    os.replace(tmp, path)
    return doc_choices


def show(path: Path | None = None, device: str = "cpu") -> str:
    """The decisions as text (``jitort tune --show``)."""
    if device == "cuda" and _gpu() is None:
        return "no CUDA GPU here: the CUDA choices follow their default rules"
    path = Path(path) if path is not None else decisions_path(device)
    ident = machine(device)
    if device == "cuda":
        lines = [f"GPU: {_describe(ident, device)}"]
    else:
        lines = [f"machine: {ident['model']} ({ident['vendor']}, LLVM {ident['llvm_cpu']}, "
                 f"{'AVX-512' if ident['avx512'] else 'no AVX-512'}, {ident['cores']} cores, "
                 f"BLAS {ident['blas']})"]
    lines.append(f"decisions: {path}")
    data = load(path, device) if path.exists() else {}
    run = "jitort tune" + (" --device cuda" if device == "cuda" else "")
    if not data:
        lines.append(f"not calibrated: every choice follows its default rule (run `{run}`)")
    for name, choice in choices(device).items():
        entry = data.get(name)
        lines.append("")
        lines.append(f"{name}: {choice.doc}")
        if not entry:
            lines.append("  default rule (not measured here)")
            continue
        if entry.get("demoted"):
            lines.append(f"  DEMOTED on this machine: {', '.join(entry['demoted'])} (over "
                         f"{DEMOTE}x the best in most buckets; the default rule avoids it)")
        if not entry.get("complete", True):
            lines.append("  cut short by the budget: buckets not listed follow the default "
                         f"rule (`{run}` again goes on)")
        if choice.place is not None:
            lines.append(f"  buckets not listed: the pick of the nearest listed ones (at most "
                         f"{NEAREST_MAX} class steps away, the majority), else the default rule")
        cands = [c.name for c in choice.candidates]
        lines.append(f"  {'bucket':<22}{'pick':>10}{'default':>10}" +
                     "".join(f"{c + ' GF/s':>14}" for c in cands))
        changed = 0
        for text, b in sorted(entry["buckets"].items(), key=lambda kv: _bucket_key(kv[0])):
            dflt = choice.default(choice.problem(_bucket_key(text)))
            changed += b["pick"] != dflt
            gf = b.get("gflops", {})
            lines.append(f"  {text:<22}{b['pick']:>10}{dflt:>10}" +
                         "".join(f"{gf[c]:14.1f}" if c in gf else f"{'-':>14}" for c in cands))
        lines.append(f"  {len(entry['buckets'])} buckets measured, {changed} differ from the "
                     f"default rule")
    return "\n".join(lines)


def summary_lines(device: str = "cpu") -> list:
    """One line per choice of ``device`` for ``jitort explain``: calibrated or default, and
    demotions."""
    data = load(device=device) if enabled() else {}
    out = []
    for name in choices(device):
        e = data.get(name)
        if not e:
            out.append(f"{name}: default rule (not calibrated on this machine)")
        else:
            dem = f"; demoted: {', '.join(e['demoted'])}" if e.get("demoted") else ""
            out.append(f"{name}: calibrated here ({len(e['buckets'])} buckets){dem}")
    return out


# --- calibration on first use ----------------------------------------------------------------

_started: dict = {}   # device -> whether this process already looked (started or not)


def _calibrated(data: dict, device: str = "cpu") -> bool:
    """Whether every choice has decisions here and its last run reached all of its buckets (a
    run cut by its budget leaves a choice ``complete: false``: the next one goes on)."""
    return all(name in data and data[name].get("complete", True) for name in choices(device))


def ensure_background(device: str = "cpu") -> None:
    """Start ``jitort tune --background`` when a choice has no decisions for this machine and
    these kernel sources (first use, or an update that changed a kernel a choice measured): a
    detached process at the lowest priority; models compiled meanwhile use the default rules,
    those compiled after it wrote the file its decisions. Never blocks or fails a caller.
    ``device="cuda"``: the GPU's choices, on a real GPU only (never the simulator's)."""
    if _started.get(device) or not enabled() or not options.read("tune_background"):
        return
    _started[device] = True
    try:
        if device == "cuda" and not measurable_gpu():
            return        # no GPU, or the simulator: nothing worth measuring
        path = decisions_path(device)
        if path.exists() and _calibrated(load(path, device), device):
            return        # every choice calibrated here, on these kernel sources
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = path.with_suffix(".running")
        try:
            if time.time() - lock.stat().st_mtime < 600:
                return            # another process is calibrating
        except OSError:
            pass
        lock.write_text(str(os.getpid()))
        cmd = [sys.executable, "-m", "jitort", "tune", "--background", "--quiet"]
        if device != "cpu":
            cmd += ["--device", device]
        subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True,
                         preexec_fn=(lambda: os.nice(19)) if hasattr(os, "nice") else None)
    except Exception as e:  # noqa: BLE001 - calibration is an optimization, never a failure
        warnings.warn(f"jitort: background calibration not started: {e}", TuningWarning)
