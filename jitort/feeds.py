"""Checking a call's feeds against the model's inputs before anything runs.

Every check raises :class:`~jitort.errors.InvalidInput` naming the input and what was expected.
Per-call cost is kept to a few microseconds: C-contiguous arrays of the declared dtypes whose
shapes already passed the full checks need only the dtype and layout tests.
"""
from __future__ import annotations

from typing import Sequence

import ml_dtypes
import numpy as np

from .errors import InvalidInput
from .ir import InputInfo, Value  # noqa: F401 (InputInfo: this module's API)

_MISSING = object()

#: shape tuples remembered as valid per model before the memo starts over
_VALID_SHAPES_MAX = 1024


class InputSpec:
    """Precomputed checks for one graph input."""

    def __init__(self, v: Value):
        self.name = v.name
        self.untyped = v.dtype is None  # a sequence or optional input: passed through as given
        self.dtype = None if v.dtype is None else np.dtype(v.dtype)
        self.shape = v.shape
        self.rank = None if v.shape is None else len(v.shape)
        self.fixed = [(k, d) for k, d in enumerate(v.shape or ()) if isinstance(d, int)]
        self.symbolic = [(k, d) for k, d in enumerate(v.shape or ()) if isinstance(d, str)]

    def describe(self) -> str:
        if self.untyped:
            return "a sequence or optional value"
        dims = "?" if self.shape is None else list(self.shape)
        return f"{self.dtype.name}{dims}"

    def coerce(self, a) -> np.ndarray:
        if isinstance(a, np.ndarray):
            return a
        if hasattr(a, "__array__") or isinstance(a, (list, tuple, int, float, bool)):
            try:
                return np.asarray(a)
            except Exception as e:  # ragged nested lists and the like
                raise InvalidInput(f"input {self.name!r} cannot be converted to an array: "
                                   f"{e}") from None
        raise InvalidInput(f"input {self.name!r} must be a numpy array, got {type(a).__name__}")

    def check_shape(self, a: np.ndarray, symbols: dict) -> None:
        """Rank and fixed dims of ``a``; symbolic dims agree with those of earlier inputs
        (``symbols``: symbol -> (size, input name), filled as it goes)."""
        shape = a.shape
        if len(shape) != self.rank:
            raise InvalidInput(f"input {self.name!r} has rank {a.ndim} (shape {shape}), "
                               f"expected rank {self.rank} ({self.describe()})")
        for k, want in self.fixed:
            if shape[k] != want:
                raise InvalidInput(f"input {self.name!r} has shape {shape}: dim {k} must "
                                   f"be {want}")
        for k, sym in self.symbolic:
            prev = symbols.setdefault(sym, (shape[k], self.name))
            if prev[0] != shape[k]:
                raise InvalidInput(f"input {self.name!r} dim {k} ({sym}) is {shape[k]} "
                                   f"but input {prev[1]!r} has {sym}={prev[0]}")

    def contiguous(self, a: np.ndarray) -> np.ndarray:
        """``a`` as a C-contiguous array; a copy is refused before allocating if it cannot fit."""
        if a.flags.c_contiguous:
            return a
        avail = available_memory()
        if a.nbytes > avail:
            raise InvalidInput(
                f"input {self.name!r} (shape {a.shape}, a non-contiguous view) needs a "
                f"{fmt_bytes(a.nbytes)} contiguous copy, which exceeds available "
                f"memory ({fmt_bytes(avail)})")
        try:
            return np.ascontiguousarray(a)
        except MemoryError:
            raise InvalidInput(f"input {self.name!r} (shape {a.shape}): no memory for "
                               f"its {fmt_bytes(a.nbytes)} contiguous copy") from None


class FeedChecker:
    """The inputs of one model and the checks a call's feeds go through."""

    def __init__(self, inputs: Sequence[Value]):
        self.names = [v.name for v in inputs]
        self.index = {n: i for i, n in enumerate(self.names)}
        self.specs = [InputSpec(v) for v in inputs]
        #: every input typed: the fast path of :meth:`validate` applies
        self.fast = not any(spec.untyped for spec in self.specs)
        #: shape tuples :meth:`validate_full` accepted (read by the executor's fast path)
        self.valid_shapes: dict[tuple, bool] = {}

    def from_call(self, args: tuple, kwargs: dict) -> dict:
        """Feeds by name from a call's positional and keyword arrays."""
        if len(args) > len(self.names):
            raise InvalidInput(f"model takes {len(self.names)} inputs, got {len(args)} "
                               "positional arrays")
        feeds = dict(zip(self.names, args))
        for k, v in kwargs.items():
            if k in feeds:
                raise InvalidInput(f"input {k!r} given both positionally and by name")
            feeds[k] = v
        return feeds

    def validate(self, feeds: dict) -> list[np.ndarray]:
        """Check every feed against the model; return the inputs, in order, as contiguous arrays
        (untyped inputs as given)."""
        specs = self.specs
        if self.fast and len(feeds) == len(specs):
            arrays = []
            for spec in specs:
                a = feeds.get(spec.name)
                if (type(a) is not np.ndarray or a.dtype is not spec.dtype
                        or not a.flags.c_contiguous):
                    break
                arrays.append(a)
            else:
                key = tuple([a.shape for a in arrays])
                if key in self.valid_shapes:
                    return arrays
                arrays = self.validate_full(feeds)
                if len(self.valid_shapes) >= _VALID_SHAPES_MAX:
                    self.valid_shapes.clear()
                self.valid_shapes[key] = True
                return arrays
        return self.validate_full(feeds)

    def validate_full(self, feeds: dict) -> list[np.ndarray]:
        unknown = [k for k in feeds if k not in self.index]
        if unknown:
            raise InvalidInput(f"unknown input name(s) {unknown}; the model's inputs are "
                               f"{self.names}")
        arrays = []
        symbols: dict[str, tuple[int, str]] = {}
        for spec in self.specs:
            a = feeds.get(spec.name, _MISSING)
            if a is _MISSING:
                raise InvalidInput(f"missing input {spec.name!r} ({spec.describe()})")
            if spec.untyped:
                arrays.append(a)
                continue
            if type(a) is not np.ndarray:
                a = spec.coerce(a)
            if a.dtype != spec.dtype:
                raise InvalidInput(f"input {spec.name!r} has dtype {a.dtype}, expected "
                                   f"{spec.dtype.name} (jitort does not cast: pass "
                                   f".astype(np.{spec.dtype.name}) if that is what you want)")
            if spec.rank is not None:
                spec.check_shape(a, symbols)
            arrays.append(spec.contiguous(a))
        return arrays

    def examples(self, shapes: dict) -> dict:
        """Zero-filled feeds of the given shapes (``{input name: shape}``); inputs whose shape
        is fully static may be left out."""
        unknown = [k for k in shapes if k not in self.index]
        if unknown:
            raise InvalidInput(f"example shapes name unknown input(s) {unknown}; the model's "
                               f"inputs are {self.names}")
        feeds = {}
        for spec in self.specs:
            if spec.name not in shapes:
                if spec.shape is not None and all(isinstance(d, int) for d in spec.shape):
                    shape = spec.shape
                else:
                    raise InvalidInput(f"example shapes lack input {spec.name!r} "
                                       f"({spec.describe()})")
            else:
                shape = tuple(int(d) for d in shapes[spec.name])
            if spec.untyped:
                raise InvalidInput(f"cannot make an example value for {spec.name!r} "
                                   f"({spec.describe()})")
            feeds[spec.name] = np.zeros(shape, spec.dtype)
        return feeds

    def all_static(self) -> bool:
        """Every input typed and of fully fixed shape (its feeds can be made up front)."""
        return all(not s.untyped and s.shape is not None
                   and all(isinstance(d, int) for d in s.shape) for s in self.specs)


def available_memory() -> int:
    """Bytes the kernel says can be allocated without swapping (MemAvailable), else a huge number."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 1 << 62


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


#: Element types generated code holds as their uint16 words (Numba has no such arrays).
HALF_DTYPES = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


#: Element types generated code holds as their bytes: float8, float4, int4 / uint4, int2 /
#: uint2, which ml_dtypes stores unpacked, one per byte (jitort/codegen/lowprec.py).
BYTE_DTYPES = tuple(np.dtype(t) for t in (
    ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2,
    ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e8m0fnu, ml_dtypes.float4_e2m1fn,
    ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2))


def _storage(a):
    if a.dtype in HALF_DTYPES:
        return a.view(np.uint16)
    return a.view(np.uint8) if a.dtype in BYTE_DTYPES else a


def storage_views(arrays) -> list:
    """``arrays`` with every float16 / bfloat16 array viewed as uint16 and every byte-stored
    low-precision one as uint8 (no copy): what a compiled driver takes; the caller keeps the
    typed arrays (outputs are written through the views)."""
    return [_storage(a) for a in arrays]


def has_half(arrays) -> bool:
    """Whether any of ``arrays`` needs a storage view (see :func:`storage_views`)."""
    return any(a.dtype in HALF_DTYPES or a.dtype in BYTE_DTYPES for a in arrays)
