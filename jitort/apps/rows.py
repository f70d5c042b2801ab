"""Rows of a Parquet dataset through a compiled model: what every batch engine shares.

The row format (one sample per row; nested lists; the ``row`` column) and the error policy are
described in :mod:`jitort.apps.batch`. Here: the per-row view of the model's inputs
(:class:`InputLayout`), Arrow columns to numpy rows and back, :class:`Predictor` (one Arrow
table of rows through the model, with a per-row error column), the input files and
:class:`Sink` (the ordered Parquet writer), and :func:`read_output`.
"""
from __future__ import annotations

import json
import time
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from jitort.errors import InvalidInput, InvalidModel, JitortError

#: output column holding each row's 0-based position in the input
ROW = "row"
#: per-row error message (null where the row ran) in :class:`Predictor`'s result tables
ERROR = "__jitort_error__"
ERRORS_FILE = "_errors.jsonl"
#: a new output file is started after this many bytes of Arrow data
PART_BYTES = 256 << 20


def _pa():
    try:
        import pyarrow
    except ImportError:
        raise JitortError("batch inference reads and writes Parquet with pyarrow, which is not "
                          "installed: pip install 'jitort[batch]' (or 'jitort[ray]')") from None
    return pyarrow


class ColumnError(InvalidInput):
    """A whole column cannot feed the model (missing, not numeric, wrong dtype or nesting)."""


# --- what the model takes per row --------------------------------------------------------------

@dataclass(frozen=True)
class InputLayout:
    """One model input seen row by row: its per-sample dims (ints, None where unknown)."""

    name: str
    dtype: np.dtype
    dims: tuple

    def describe(self) -> str:
        return "[" + ", ".join("?" if d is None else str(d) for d in self.dims) + "]"


def input_layouts(cm) -> list[InputLayout]:
    """The per-row view of each input of a compiled model; refuses inputs that cannot be fed
    row by row (no leading batch dim, a fixed batch dim other than 1, non-tensor inputs)."""
    out = []
    for info in cm.inputs:
        if info.dtype is None:
            raise InvalidModel(f"input {info.name!r} is not a tensor: batch inference feeds "
                               "tensors only")
        shape = tuple(info.shape)
        if not shape:
            raise InvalidModel(f"input {info.name!r} is a scalar: batch inference needs a "
                               "leading batch dimension to stack rows along")
        if isinstance(shape[0], int) and shape[0] != 1:
            raise InvalidModel(f"input {info.name!r} has a fixed batch dimension of {shape[0]}; "
                               "batch inference needs a dynamic (or 1) first dimension")
        dims = tuple(d if isinstance(d, int) else None for d in shape[1:])
        out.append(InputLayout(info.name, np.dtype(info.dtype), dims))
    return out


def _batched(cm) -> bool:
    """Whether rows can be stacked along the first dim (False: every input fixes it at 1)."""
    return any(not isinstance(info.shape[0], int) for info in cm.inputs)


# --- Arrow columns -> numpy rows ---------------------------------------------------------------

def _unwrap_type(t) -> tuple[int, Any]:
    """(list nesting depth, leaf type) of an Arrow type; extension types by their storage."""
    pa = _pa()
    depth = 0
    while True:
        if isinstance(t, pa.ExtensionType):
            t = t.storage_type
        elif (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
              or pa.types.is_list_view(t) or pa.types.is_large_list_view(t)):
            t, depth = t.value_type, depth + 1
        else:
            return depth, t


def _check_leaf(name: str, leaf_type, want: np.dtype) -> np.dtype:
    pa = _pa()
    if not (pa.types.is_integer(leaf_type) or pa.types.is_floating(leaf_type)
            or pa.types.is_boolean(leaf_type)):
        raise ColumnError(f"column {name!r} holds {leaf_type} values, not numbers; input "
                          f"{name!r} takes {want.name}")
    have = np.dtype(leaf_type.to_pandas_dtype())
    if not np.can_cast(have, want, "same_kind"):
        raise ColumnError(f"column {name!r} holds {have.name} values, which do not cast to "
                          f"input {name!r}'s {want.name} (store them as {want.name})")
    return have


def _check_depth(inp: InputLayout, depth: int) -> None:
    m = inp.dims
    if depth == len(m) or (depth == 1 and sum(d is None for d in m) <= 1):
        return
    if depth == 1:
        raise ColumnError(f"column {inp.name!r}: a flat list cannot fill the per-row shape "
                          f"{inp.describe()}, which has several unknown dims; store each row "
                          "as nested lists of that shape")
    raise ColumnError(f"column {inp.name!r} holds lists nested {depth} deep; input {inp.name!r} "
                      f"takes a per-row shape {inp.describe()} (a flat list, or nested lists "
                      f"{len(m)} deep)")


def check_schema(schema, layouts: list[InputLayout], where: str = "") -> None:
    """Raise :class:`ColumnError` naming the column if ``schema`` cannot feed the model."""
    names = set(schema.names)
    for inp in layouts:
        if inp.name not in names:
            raise ColumnError(f"column {inp.name!r} is missing{where}: the model's inputs are "
                              f"{[i.name for i in layouts]}, the columns are {schema.names}")
        depth, leaf = _unwrap_type(schema.field(inp.name).type)
        _check_leaf(inp.name, leaf, inp.dtype)
        _check_depth(inp, depth)


def _plain(arr):
    """One contiguous Arrow array: chunks combined, extension and fixed-size lists as lists."""
    pa = _pa()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()
    if isinstance(arr.type, pa.ExtensionType):
        arr = arr.storage
    t = arr.type
    if pa.types.is_fixed_size_list(t) or pa.types.is_list_view(t):
        arr = arr.cast(pa.list_(t.value_field))
    elif pa.types.is_large_list_view(t):
        arr = arr.cast(pa.large_list(t.value_field))
    return arr


def _any_in(mask: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per row: whether ``mask`` has a True in ``[lo, hi)``."""
    c = np.concatenate([[0], np.cumsum(mask, dtype=np.int64)])
    return c[hi] > c[lo]


@dataclass
class _Cells:
    leaf: np.ndarray  # every value of the column, rows contiguous
    start: np.ndarray  # per row: index of its first value in leaf
    shape: np.ndarray  # per row: its per-sample shape, [n, rank]
    problem: list  # per row: None or a message


def _cells(arr, inp: InputLayout) -> _Cells:
    """Split one Arrow column into rows: each row's values and per-sample shape (from the
    nesting, or reshaped from a flat list), with a message for each row that cannot feed."""
    arr = _plain(arr)
    depth, leaf_type = _unwrap_type(arr.type)
    have = _check_leaf(inp.name, leaf_type, inp.dtype)
    _check_depth(inp, depth)
    n = len(arr)
    lo, hi = np.arange(n, dtype=np.int64), np.arange(1, n + 1, dtype=np.int64)
    dims = np.zeros((n, depth), np.int64)
    null = np.zeros(n, bool)
    ragged = np.zeros(n, bool)
    cur = arr
    for k in range(depth):
        cur = _plain(cur)
        if cur.null_count:
            null |= _any_in(cur.is_null().to_numpy(zero_copy_only=False), lo, hi)
        off = cur.offsets.to_numpy().astype(np.int64)
        lengths = np.diff(off)
        count = hi - lo
        first = np.zeros(n, np.int64)
        some = count > 0
        first[some] = lengths[lo[some]]
        dims[:, k] = first
        ragged |= _any_in(lengths != np.repeat(first, count), lo, hi)
        base = int(off[0])
        cur = cur.values.slice(base, int(off[-1]) - base)
        lo, hi = off[lo] - base, off[hi] - base
    cur = _plain(cur)
    if cur.null_count:
        null |= _any_in(cur.is_null().to_numpy(zero_copy_only=False), lo, hi)
        cur = cur.fill_null(False if have.kind == "b" else 0)
    leaf = cur.to_numpy(zero_copy_only=False)
    shape, bad = _reshape(dims, inp)
    problem: list = [None] * n
    for r in np.flatnonzero(null | ragged | bad):
        if null[r]:
            problem[r] = f"column {inp.name!r} is null (or holds a null)"
        elif ragged[r]:
            problem[r] = f"column {inp.name!r} holds ragged nested lists"
        else:
            problem[r] = _shape_message(inp, dims[r])
    return _Cells(leaf, lo, shape, problem)


def _reshape(dims: np.ndarray, inp: InputLayout) -> tuple[np.ndarray, np.ndarray]:
    """Per-row per-sample shapes [n, rank] from the cells' own shapes, and which rows fail."""
    m = inp.dims
    n = len(dims)
    fixed = np.array([1 if d is None else d for d in m], np.int64)
    unknown = [k for k, d in enumerate(m) if d is None]
    if dims.shape[1] == len(m):
        known = [k for k, d in enumerate(m) if d is not None]
        bad = np.zeros(n, bool)
        for k in known:
            bad |= dims[:, k] != m[k]
        return dims, bad
    # a flat list for a per-row shape of another rank (at most one unknown dim)
    length = dims[:, 0]
    shape = np.tile(fixed, (n, 1))
    size = int(np.prod(fixed))
    if not unknown:
        return shape, length != size
    bad = (length % size != 0) if size else np.ones(n, bool)
    shape[:, unknown[0]] = length // max(size, 1)
    return shape, bad


def _shape_message(inp: InputLayout, dims) -> str:
    if len(dims) == 1 and len(inp.dims) != 1:
        return (f"column {inp.name!r} has {int(dims[0])} values, which do not reshape to the "
                f"per-row shape {inp.describe()}")
    return (f"column {inp.name!r} has shape {[int(d) for d in dims]}, the model takes "
            f"{inp.describe()} per row")


def _gather(c: _Cells, rows: np.ndarray, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """The rows' values stacked into one [len(rows), *shape] array of ``dtype``."""
    size = int(np.prod(shape, dtype=np.int64))
    starts = c.start[rows]
    s0 = int(starts[0])
    if np.array_equal(starts, s0 + size * np.arange(len(rows))):  # contiguous: a view
        flat = c.leaf[s0:s0 + size * len(rows)]
    else:
        flat = c.leaf[starts[:, None] + np.arange(size)]
    return flat.reshape((len(rows),) + shape).astype(dtype, copy=False)


# --- numpy outputs -> Arrow columns ------------------------------------------------------------

def arrow_type(dtype: np.dtype, rank: int):
    """The Arrow type of a per-row value of this dtype and per-sample rank: nested lists."""
    pa = _pa()
    t = pa.from_numpy_dtype(np.dtype(dtype))
    for _ in range(rank):
        t = pa.list_(t)
    return t


def to_arrow(a: np.ndarray):
    """An array [n, *shape] as an Arrow array of n nested lists of that shape (no copy of the
    values where numpy's layout allows)."""
    pa = _pa()
    a = np.ascontiguousarray(a)
    arr = pa.array(a.reshape(-1))
    for d in reversed(a.shape[1:]):
        count = len(arr) // d if d else a.shape[0]
        if len(arr) >= 2 ** 31:
            raise JitortError(f"an output batch of {a.shape} has more than 2**31 values; "
                              "use a smaller batch size")
        offsets = pa.array(np.arange(count + 1, dtype=np.int32) * d)
        arr = pa.ListArray.from_arrays(offsets, arr)
    return arr


# --- one table of rows through the model -------------------------------------------------------

class Predictor:
    """Runs a compiled model over Arrow tables of rows (see the module docstring).

    ``predictor(table)`` returns a table with one column per model output (nested lists; null
    for rows that did not run) and :data:`ERROR`, a per-row message (null where the row ran).
    Rows with equal per-sample shapes run together, one model call per shape (each row alone
    when the model fixes the batch dim at 1); when a call fails, its rows run one by one so
    that only the rows at fault carry an error.
    """

    def __init__(self, model):
        self.model = model
        self.layouts = input_layouts(model)
        self.batched = _batched(model)
        self.output_types = []
        for v in model.graph.outputs:
            rank = None if v.shape is None or v.dtype is None else len(v.shape) - 1
            self.output_types.append(None if rank is None or rank < 0
                                     else arrow_type(v.dtype, rank))

    def __call__(self, table):
        n = table.num_rows
        problem: list = [None] * n
        cells = {}
        try:
            for inp in self.layouts:
                if inp.name not in table.column_names:
                    raise ColumnError(f"column {inp.name!r} is missing")
                c = cells[inp.name] = _cells(table.column(inp.name), inp)
                problem = [p or q for p, q in zip(problem, c.problem)]
        except ColumnError as e:
            problem = [str(e)] * n
        ok = np.array([p is None for p in problem], bool)
        ran: list[tuple[np.ndarray, list]] = []  # (rows, outputs) per model call that worked
        for rows in self._groups(cells, np.flatnonzero(ok)):
            ran.extend(self._run(rows, cells, problem))
        return self._assemble(n, ran, problem)

    def _groups(self, cells: dict, rows: np.ndarray) -> Iterable[np.ndarray]:
        if not len(rows):
            return
        if not self.batched:
            yield from (rows[i:i + 1] for i in range(len(rows)))
            return
        key = np.concatenate([cells[i.name].shape[rows] for i in self.layouts], axis=1)
        if not key.shape[1] or (key == key[0]).all():
            yield rows
            return
        _, inverse = np.unique(key, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        for g in range(inverse.max() + 1):
            yield rows[inverse == g]

    def _feeds(self, cells: dict, rows: np.ndarray) -> dict:
        feeds = {}
        for i in self.layouts:
            c = cells[i.name]
            feeds[i.name] = _gather(c, rows, tuple(int(d) for d in c.shape[rows[0]]), i.dtype)
        return feeds

    def _run(self, rows: np.ndarray, cells: dict, problem: list) -> list:
        try:
            outs = self.model.run(None, self._feeds(cells, rows))
        except JitortError as e:
            if len(rows) == 1:
                problem[rows[0]] = f"the model refused the row: {type(e).__name__}: {e}"
                return []
            done = []  # find the rows at fault: each row alone
            for i in range(len(rows)):
                done.extend(self._run(rows[i:i + 1], cells, problem))
            return done
        for name, o in zip(self.model.output_names, outs):
            if np.ndim(o) == 0 or o.shape[0] != len(rows):
                raise InvalidModel(f"output {name!r} has shape {list(np.shape(o))} for a batch "
                                   f"of {len(rows)} rows: batch inference needs every output "
                                   "to lead with the batch dimension")
        return [(rows, outs)]

    def _assemble(self, n: int, ran: list, problem: list):
        pa = _pa()
        order = np.concatenate([rows for rows, _ in ran]) if ran else np.zeros(0, np.int64)
        in_order = len(order) == n and np.array_equal(order, np.arange(n))
        pos = np.full(n, len(order), np.int64)
        pos[order] = np.arange(len(order))
        columns = {}
        for k, name in enumerate(self.model.output_names):
            chunks = [to_arrow(outs[k]) for _, outs in ran]
            t = chunks[0].type if chunks else (self.output_types[k] or pa.null())
            arr = pa.concat_arrays(chunks) if chunks else pa.array([], t)
            if not in_order:
                arr = pa.concat_arrays([arr, pa.nulls(1, t)]).take(pa.array(pos))
            columns[name] = arr
        columns[ERROR] = pa.array(problem, pa.string())
        return pa.table(columns)


# --- input files, output folder ----------------------------------------------------------------

def input_files(path) -> list[Path]:
    """The Parquet files of a file or folder, in sorted path order."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise InvalidInput(f"input not found: {p}")
    files = sorted(f for f in p.rglob("*.parquet") if f.is_file()
                   and not any(part.startswith(("_", ".")) for part in f.relative_to(p).parts))
    if not files:
        raise InvalidInput(f"no Parquet files (*.parquet) under {p}")
    return files


def scan_inputs(files: list[Path], layouts: list[InputLayout]) -> list[int]:
    """Rows per file (from the footers); every file's schema checked against the model."""
    _pa()
    import pyarrow.parquet as pq
    counts = []
    for f in files:
        try:
            meta = pq.read_metadata(f)
        except Exception as e:
            raise InvalidInput(f"cannot read Parquet file {f}: {e}") from None
        check_schema(meta.schema.to_arrow_schema(), layouts, where=f" in {f}")
        counts.append(meta.num_rows)
    return counts


class Sink:
    """Numbers result rows in input order, applies the error policy and writes Parquet parts.

    ``write(table)`` takes :class:`Predictor` results in input order. Errors raise
    :class:`InvalidInput` (``on_error="raise"``; the parts written so far are removed) or are
    appended to ``_errors.jsonl`` (``"skip"``).
    """

    def __init__(self, out_dir, files: list[Path], counts: list[int], on_error: str = "raise",
                 progress: bool | None = None, output_names: list[str] | None = None):
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if output_names and ROW in output_names:
            raise InvalidModel(f"a model output is named {ROW!r}, the name of the row-number "
                               "column of batch inference's output")
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        taken = sorted(p.name for p in self.dir.iterdir()
                       if p.suffix == ".parquet" or p.name == ERRORS_FILE)
        if taken:
            raise InvalidInput(f"output folder {self.dir} already holds {taken[:3]}...; remove "
                               "them or choose another folder")
        self.files, self.on_error = files, on_error
        self.bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64).tolist()
        self.total = self.bounds[-1]
        self.rows = self.written = 0
        self.errors: list[dict] = []
        self.parts: list[Path] = []
        self._writer = self._schema = None
        self._part_bytes = 0
        self._errfile = open(self.dir / ERRORS_FILE, "w") if on_error == "skip" else None
        from tqdm.auto import tqdm
        self.bar = tqdm(total=self.total, unit="row", desc="jitort batch", dynamic_ncols=True,
                        disable=None if progress is None else not progress)
        self.first_result_at: float | None = None

    def where(self, row: int) -> tuple[str, int]:
        k = bisect_right(self.bounds, row) - 1
        return str(self.files[k]), row - self.bounds[k]

    def write(self, table) -> None:
        pa = _pa()
        import pyarrow.compute as pc
        if self.first_result_at is None:
            self.first_result_at = time.perf_counter()
        n = table.num_rows
        first = self.rows
        self.rows += n
        err = table.column(ERROR)
        failed = err.is_valid()
        if err.null_count != n:
            for i in np.flatnonzero(failed.to_numpy(zero_copy_only=False)):
                row = first + int(i)
                file, file_row = self.where(row)
                msg = err[int(i)].as_py()
                if self.on_error == "raise":
                    raise InvalidInput(f"row {row} ({file} row {file_row}): {msg}")
                rec = {"row": row, "file": file, "file_row": file_row, "error": msg}
                self.errors.append(rec)
                self._errfile.write(json.dumps(rec) + "\n")
            table = table.filter(pc.invert(failed))
        table = table.drop_columns([ERROR])
        rows = np.arange(first, first + n, dtype=np.int64)
        if len(table) != n:
            rows = rows[~failed.to_numpy(zero_copy_only=False)]
        table = table.add_column(0, ROW, pa.array(rows))
        if len(table):
            self._write_part(table)
        self.bar.update(n)

    def _write_part(self, table) -> None:
        import pyarrow.parquet as pq
        if self._schema is None:
            self._schema = table.schema
        elif table.schema != self._schema:
            table = table.cast(self._schema)
        if self._writer is None:
            path = self.dir / f"part-{len(self.parts):05d}.parquet"
            self.parts.append(path)
            # float outputs do not repeat: dictionary pages would only cost time
            self._writer = pq.ParquetWriter(path, self._schema, use_dictionary=False)
            self._part_bytes = 0
        self._writer.write_table(table)
        self.written += len(table)
        self._part_bytes += table.nbytes
        if self._part_bytes >= PART_BYTES:
            self._writer.close()
            self._writer = None

    def close(self, failed: bool = False) -> None:
        self.bar.close()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._errfile is not None:
            self._errfile.close()
        if failed:  # no half-written output that looks complete
            for p in self.parts:
                p.unlink(missing_ok=True)
            if self._errfile is not None:
                (self.dir / ERRORS_FILE).unlink(missing_ok=True)
        elif self.rows != self.total:
            raise JitortError(f"batch inference saw {self.rows} rows, the input has "
                              f"{self.total}")


def read_batches(files: list[Path], layouts: list[InputLayout], batch_size: int):
    """The input columns of ``files`` as Arrow tables of at most ``batch_size`` rows, in order."""
    pa = _pa()
    import pyarrow.parquet as pq
    names = [i.name for i in layouts]
    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=batch_size, columns=names):
            yield pa.Table.from_batches([batch])


def read_output(path) -> dict[str, np.ndarray]:
    """An output folder (or file) as numpy: ``row`` and one array per output, stacked
    [rows, *per-sample shape] when every row has the same shape, else an object array of
    per-row arrays."""
    import pyarrow.parquet as pq
    p = Path(path)
    files = [p] if p.is_file() else sorted(p.glob("part-*.parquet"))
    table = _pa().concat_tables([pq.read_table(f) for f in files]) if files else None
    if table is None:
        return {}
    return {name: column_to_numpy(table.column(name)) for name in table.column_names}


def column_to_numpy(col) -> np.ndarray:
    """One column of nested lists as numpy (see :func:`read_output`)."""
    arr = _plain(col)
    depth, _ = _unwrap_type(arr.type)
    n = len(arr)
    dims = []
    cur = arr
    for _ in range(depth):
        cur = _plain(cur)
        lengths = np.diff(cur.offsets.to_numpy())
        if len(lengths) and (lengths != lengths[0]).any():
            return np.array([np.asarray(x) for x in arr.to_pylist()] + [None],
                            dtype=object)[:-1]
        dims.append(int(lengths[0]) if len(lengths) else 0)
        cur = cur.flatten()
    return _plain(cur).to_numpy(zero_copy_only=False).reshape([n] + dims)

