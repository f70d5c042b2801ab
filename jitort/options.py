"""jitort's settings: one frozen :class:`Options` dataclass, one field per ``JITORT_*`` variable.

Each field carries its environment variable, its parser (which names the allowed values when a
value is bad: :class:`jitort.InvalidOption`), a one-line doc and who reads it, as field
metadata. :meth:`Options.from_env` builds one from the environment with keyword overrides;
:func:`jitort.compile` builds one per call (``CompiledModel.options``) and passes it down.

Three scopes:

* ``compile``: read once per :func:`jitort.compile` call; a keyword argument of ``compile()`` of
  the field's name overrides the variable (``compile(model, layout="nchw")``);
* ``process``: settings of the whole process (the cache folder, the compile-queue bound,
  calibration, how drivers call kernels), read where they are used through :func:`read`, since
  they outlive one model;
* ``kernels``: read by the kernel library itself (``kernels/`` never imports jitort); listed
  here so that the table of docs/runtime.md is complete and ``from_env`` checks them too.

This is the only module of jitort that reads ``JITORT_*`` variables (tests/test_options.py
checks the source). docs/runtime.md's options table is :func:`render_table`'s output
(``python -m jitort.options`` rewrites it; tests/test_docs.py checks it).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from .errors import InvalidOption

COMPILE, PROCESS, KERNELS = "compile", "process", "kernels"

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


# --- parsers: raw string -> value, or ValueError(what was expected) --------------------------
def _flag(raw: str) -> bool:
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(f"0 or 1 (or one of {', '.join(_TRUE + _FALSE)})")


def _number(kind: type, least, what: str) -> Callable[[str], Any]:
    """A parser of a ``kind`` (int or float) at least ``least``."""
    def parse(raw: str):
        try:
            x = kind(raw.strip())
        except ValueError:
            x = None
        if x is None or not x >= least:
            raise ValueError(what)
        return x
    return parse


_positive_int = _number(int, 1, "a positive int")
_count = _number(int, 0, "an int >= 0")
_microseconds = _number(float, 0.0, "a number of microseconds >= 0")


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        v = raw.strip().lower()
        if v not in allowed:
            raise ValueError(f"one of {', '.join(allowed)}")
        return v
    parse.allowed = allowed  # type: ignore[attr-defined]
    return parse


def _zero_or_one(raw: str) -> bool:
    """As the kernel library reads it: ``0`` off, ``1`` on."""
    v = raw.strip()
    if v not in ("0", "1"):
        raise ValueError("0 or 1")
    return v == "1"


def _text(raw: str) -> str:
    return raw.strip()


def _path(raw: str) -> Path:
    return Path(raw).expanduser()


def _factors(raw: str) -> tuple:
    """``candidate:factor,...`` -> ((candidate, factor), ...)."""
    out = []
    for item in raw.split(","):
        if not item.strip():
            continue
        name, sep, factor = item.partition(":")
        try:
            out.append((name.strip(), float(factor)))
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise ValueError("a comma-separated list of candidate:factor (a number)")
    return tuple(out)


def _option(default: Any, env: str, doc: str, parse: Callable[[str], Any], *, scope: str,
            reader: str, shown: str | None = None, values: str | None = None):
    """A field of :class:`Options`; ``shown``: the default as the table says it, ``values``:
    the accepted values as the table says them (default: what ``parse`` allows)."""
    meta = {"env": env, "doc": doc, "parse": parse, "scope": scope, "reader": reader,
            "shown": shown, "values": values}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Options:
    """Every setting jitort and its kernel library read from ``JITORT_*`` variables.

    ``Options()`` holds the defaults (``cache_dir`` and ``compile_jobs``: None, resolved by
    :meth:`from_env` from the platform); :meth:`from_env` reads the environment."""

    # --- per compile() call ---------------------------------------------------------------
    tiered: bool = _option(
        True, "JITORT_TIERED", "run the numpy interpreter while the program compiles in the "
        "background; off: compile on the first call", _flag, scope=COMPILE,
        reader="jitort/runtime.py")
    strict: bool = _option(
        False, "JITORT_STRICT", "a node left to the interpreter raises `UnsupportedOp`",
        _flag, scope=COMPILE, reader="jitort/runtime.py")
    layout: str = _option(
        "nhwc", "JITORT_LAYOUT", "`nchw`: no channels-last regions (the layout pass is off, "
        "for comparisons)", _choice("nhwc", "nchw"), scope=COMPILE,
        reader="jitort/passes/__init__.py")
    packed_gemm: bool = _option(
        True, "JITORT_PACKED_GEMM", "prepack constant float32 weights for jitort's gemm "
        "where calibration says so", _flag, scope=COMPILE,
        reader="jitort/codegen/lowerings/matmul.py")
    cuda_graphs: bool = _option(
        True, "JITORT_CUDA_GRAPHS", "`device=\"cuda\"`: capture each plan's launches as a CUDA "
        "graph at its second call; off: replay them one by one", _flag, scope=COMPILE,
        reader="jitort/cuda_runtime.py")
    debug_passes: int = _option(
        0, "JITORT_DEBUG", "`2`: verify the IR after every pass that rewrote it", _count,
        scope=COMPILE, reader="jitort/passes/__init__.py", values="an int >= 0")
    dump_after: str = _option(
        "", "JITORT_DUMP_AFTER", "a pass name: print the IR after that pass", _text,
        scope=COMPILE, reader="jitort/passes/__init__.py", shown="none", values="a pass name")

    # --- the process ----------------------------------------------------------------------
    cache_dir: Path | None = _option(
        None, "JITORT_CACHE_DIR", "generated modules (and the private OpenBLAS copy, under "
        "`blas/`)", _path, scope=PROCESS,
        reader="jitort/codegen/module.py; kernels/cpu/blas.py (kernel library)",
        shown="`$XDG_CACHE_HOME/jitort`, else `~/.cache/jitort`", values="a folder")
    compile_jobs: int | None = _option(
        None, "JITORT_COMPILE_JOBS", "most background compile processes alive in this "
        "process, over all models", _positive_int, scope=PROCESS,
        reader="jitort/compile_queue.py", shown="the CPUs this process may use, at most 4",
        values="a positive int")
    direct_calls: bool = _option(
        False, "JITORT_DIRECT_CALLS", "drivers call kernels directly, linked into them "
        "(slower to compile); read at import", _flag, scope=PROCESS,
        reader="jitort/codegen/native.py")
    tune: bool = _option(
        True, "JITORT_TUNE", "per-machine calibration; off: default rules, no background "
        "`jitort tune`", _flag, scope=PROCESS, reader="jitort/tuning.py")
    tune_background: bool = _option(
        True, "JITORT_TUNE_BACKGROUND", "the first `compile()` on a machine starts `jitort "
        "tune` in the background", _flag, scope=PROCESS, reader="jitort/tuning.py")
    tune_slow: tuple = _option(
        (), "JITORT_TUNE_SLOW", "multiply a candidate's measured time (tests of calibration)",
        _factors, scope=PROCESS, reader="jitort/tuning.py", shown="none",
        values="`candidate:factor,...`")

    # --- read by the kernel library itself ------------------------------------------------
    kernel_cache_dir: Path | None = _option(
        None, "JITORT_KERNEL_CACHE_DIR", "the kernel library's compiled code", _path,
        scope=KERNELS, reader="kernels/_cache.py",
        shown="`$NUMBA_CACHE_DIR`, else jitort's default cache folder", values="a folder")
    kernel_cache: str = _option(
        "folders", "JITORT_KERNEL_CACHE", "`tree`: Numba's own `__pycache__` placement for "
        "the library", _choice("folders", "tree"), scope=KERNELS, reader="kernels/_cache.py")
    kernel_link: str = _option(
        "link", "JITORT_KERNEL_LINK", "`copy`: Numba's linking (each callee linked into every "
        "caller) instead of calls by symbol", _choice("link", "copy"), scope=KERNELS,
        reader="kernels/_link.py")
    kernel_lsr: bool = _option(
        False, "JITORT_KERNEL_LSR", "let LLVM's loop strength reduction run on jitort's code "
        "(part of the cache key)", _flag, scope=KERNELS, reader="kernels/_link.py")
    blas: str = _option(
        "", "JITORT_BLAS", "forces one BLAS (an error if missing)",
        _choice("mkl", "openblas", "openblas-shared", "numba"), scope=KERNELS,
        reader="kernels/cpu/blas.py",
        shown="MKL on Intel when installed, else private OpenBLAS, else numpy's, else Numba's",
        )
    openblas_coretype: str = _option(
        "", "JITORT_OPENBLAS_CORETYPE", "the private OpenBLAS's core type; `inherit`: the "
        "process's `OPENBLAS_CORETYPE`", _text, scope=KERNELS, reader="kernels/cpu/blas.py",
        shown="the library detects the CPU", values="a core name or `inherit`")
    thread_pool: bool = _option(
        True, "JITORT_THREAD_POOL", "jitort's worker pool runs parallel regions; off: Numba's "
        "threading layer", _zero_or_one, scope=KERNELS, reader="kernels/cpu/workers.py")
    cuda_blas: str = _option(
        "cublas", "JITORT_CUDA_BLAS", "`device=\"cuda\"` products: `cublas` through CuPy where "
        "it can run, `own`: jitort's tiled kernel", _choice("cublas", "own"), scope=KERNELS,
        reader="kernels/cuda/blas.py")
    cuda_dnn: bool = _option(
        True, "JITORT_CUDA_DNN", "`device=\"cuda\"` convolutions may run through cuDNN where "
        "it is installed (PyTorch's wheels bring it); off: jitort's kernels and cuBLAS",
        _flag, scope=KERNELS, reader="kernels/cuda/dnn.py")
    cuda_tf32: bool = _option(
        False, "JITORT_CUDA_TF32", "`device=\"cuda\"`: float32 products through cuBLAS and "
        "convolutions through cuDNN may round inputs to TF32 on tensor cores (onnxruntime's "
        "`use_tf32`); off: exact float32", _flag, scope=KERNELS, reader="kernels/cuda/blas.py")
    spin_us: float = _option(
        100.0, "JITORT_SPIN_US", "microseconds a worker spins after its last chunk before "
        "sleeping", _microseconds, scope=KERNELS, reader="kernels/cpu/workers.py",
        shown="`100`", values="a number >= 0")
    spin_pause: bool = _option(
        True, "JITORT_SPIN_PAUSE", "a `pause` instruction in the spin loop (x86)", _zero_or_one,
        scope=KERNELS, reader="kernels/cpu/workers.py")
    pin_workers: str = _option(
        "auto", "JITORT_PIN_WORKERS", "bind workers to CPUs: `0` never, `1` always, `auto` "
        "when the pool and the caller are exactly the CPUs the process may use",
        _choice("auto", "0", "1", "off", "on", "no", "yes", "false", "true"), scope=KERNELS,
        reader="kernels/cpu/workers.py", values="`auto`, `0`, `1`")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides) -> "Options":
        """The settings of ``environ`` (default ``os.environ``), keyword arguments (field
        names; None meaning not given) overriding it. An empty variable counts as unset. Raises
        :class:`jitort.InvalidOption` naming the variable (or keyword) and the allowed values."""
        environ = os.environ if environ is None else environ
        unknown = sorted(set(overrides) - set(FIELDS))
        if unknown:
            raise InvalidOption(f"unknown option(s) {', '.join(unknown)}; the options are "
                                f"{', '.join(FIELDS)}")
        values = {}
        for name, f in FIELDS.items():
            given = overrides.get(name)
            values[name] = (_from_environ(f, environ) if given is None
                            else _check_keyword(f, given))
        return cls(**values)

    def fields(self, scope: str) -> dict[str, Any]:
        """``{field name: value}`` of one scope."""
        return {n: getattr(self, n) for n, f in FIELDS.items() if f.metadata["scope"] == scope}


#: field name -> its dataclasses.Field, in declaration order
FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(Options)}


def _resolve_default(name: str, environ: Mapping[str, str]) -> Any:
    """The defaults that depend on the platform."""
    if name == "cache_dir":
        return Path(environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache")) / "jitort"
    if name == "compile_jobs":
        try:
            n = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not Linux
            n = os.cpu_count() or 1
        return max(1, min(4, n))
    return FIELDS[name].default


def _from_environ(f: dataclasses.Field, environ: Mapping[str, str]) -> Any:
    env = f.metadata["env"]
    raw = environ.get(env, "")
    if not raw.strip():
        return _resolve_default(f.name, environ)
    try:
        return f.metadata["parse"](raw)
    except ValueError as e:
        raise InvalidOption(f"{env} must be {e}, got {raw!r}") from None


def _check_keyword(f: dataclasses.Field, value: Any) -> Any:
    """A keyword value, checked as its variable's text would be (a string is parsed)."""
    parse = f.metadata["parse"]
    if parse is _flag and not isinstance(value, str):
        return bool(value)
    if parse is _path:
        return Path(value).expanduser()
    if parse is _factors and not isinstance(value, str):
        value = ",".join(f"{k}:{v}" for k, v in value)
    try:
        return parse(str(value))
    except ValueError as e:
        raise InvalidOption(f"option {f.name} (or {f.metadata['env']}) must be {e}, "
                            f"got {value!r}") from None


def for_compile(environ: Mapping[str, str] | None = None, **keywords) -> Options:
    """The options of one :func:`jitort.compile` call: ``keywords`` name ``compile``-scope
    fields (others are read where they are used, or by the kernel library)."""
    wrong = sorted(k for k in keywords if k not in FIELDS or FIELDS[k].metadata["scope"] != COMPILE)
    if wrong:
        allowed = [n for n, f in FIELDS.items() if f.metadata["scope"] == COMPILE]
        raise TypeError(f"compile() got unexpected keyword argument(s) {', '.join(wrong)} "
                        f"(its options: {', '.join(allowed)}; see jitort.Options)")
    return Options.from_env(environ, **keywords)


def read(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """One setting from the environment now (a process-wide one, at its point of use)."""
    return _from_environ(FIELDS[name], os.environ if environ is None else environ)


def variables(prefixes: tuple[str, ...] = ("JITORT_",),
              environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment's variables named with one of ``prefixes``, as text (a cache key over
    every setting, whatever it means: jitort/warm.py's snapshot key)."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if k.startswith(prefixes)}


def child_environ(**settings: str) -> dict:
    """This process's environment with ``settings`` (variable -> text) added: the environment
    of a child process (a background compile, a library compile)."""
    return dict(os.environ, **settings)


# --- the table of docs/runtime.md ------------------------------------------------------------
TABLE_BEGIN, TABLE_END = "<!-- options-table -->", "<!-- /options-table -->"

_SCOPE_TEXT = {COMPILE: "per `compile()`; keyword `{name}=`", PROCESS: "process, at use",
               KERNELS: "kernel library"}


def _shown_default(f: dataclasses.Field) -> str:
    if f.metadata["shown"] is not None:
        return f.metadata["shown"]
    d = f.default
    if isinstance(d, bool):
        return "on" if d else "off"
    return f"`{d}`"


def _shown_values(f: dataclasses.Field) -> str:
    if f.metadata["values"] is not None:
        return f.metadata["values"]
    parse = f.metadata["parse"]
    if parse is _flag:
        return "`1`, `0` (or `on`/`off`, `true`/`false`, `yes`/`no`)"
    if parse is _zero_or_one:
        return "`0`, `1`"
    return ", ".join(f"`{v}`" for v in getattr(parse, "allowed", ()) if v)


def render_table() -> str:
    """docs/runtime.md's options table (markdown), one row per field of :class:`Options`."""
    rows = ["| variable | `Options` field | values | default | effect | scope | read in |",
            "|---|---|---|---|---|---|---|"]
    for name, f in FIELDS.items():
        m = f.metadata
        scope = _SCOPE_TEXT[m["scope"]].format(name=name)
        readers = ", ".join(f"`{r.split(' ')[0]}`" + (" (kernel library)" if "(" in r else "")
                            for r in m["reader"].split("; "))
        rows.append(f"| `{m['env']}` | `{name}` | {_shown_values(f)} | {_shown_default(f)} | "
                    f"{m['doc']} | {scope} | {readers} |")
    return "\n".join(rows) + "\n"


def with_table(doc: str) -> str:
    """``doc`` with the text between its table markers replaced by :func:`render_table`."""
    head, sep, rest = doc.partition(TABLE_BEGIN)
    _, sep2, tail = rest.partition(TABLE_END)
    if not sep or not sep2:
        raise KeyError(f"no {TABLE_BEGIN} ... {TABLE_END} block")
    return f"{head}{TABLE_BEGIN}\n{render_table()}{TABLE_END}{tail}"


if __name__ == "__main__":  # python -m jitort.options: rewrite docs/runtime.md's table
    doc_path = Path(__file__).resolve().parents[1] / "docs" / "runtime.md"
    doc_path.write_text(with_table(doc_path.read_text()))
    print(f"rewrote the options table of {doc_path}")
