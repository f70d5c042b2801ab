"""Batch inference over a Parquet dataset: ``jitort batch`` and the engines behind it.

Rows in, rows out. The input is a Parquet file or a folder of them (``*.parquet`` below it, in
sorted path order; names starting with ``_`` or ``.`` are skipped) with one column per model
input, one sample per row: a number, a list of numbers reshaped to the input's per-sample shape
(the input's shape without its leading batch dim; one unknown dim is inferred from the length,
like ``reshape(-1)``), or nested lists of that shape. The output is a folder of
``part-NNNNN.parquet`` files with one row per input row, in input order: a ``row`` column (the
row's 0-based position in the input) and one column per model output, named after it, holding
the row's slice of that output as nested lists of its per-sample shape.

Rows that cannot run (a null, a list of the wrong length or shape, values the model refuses)
raise :class:`~jitort.InvalidInput` naming the row, its file and the column, or with
``on_error="skip"`` go to ``_errors.jsonl`` in the output folder (one JSON object per line:
``row``, ``file``, ``file_row``, ``error``) while the rest completes. Problems of a whole
column (missing, not numeric, a dtype that does not cast to the input's) raise before anything
runs. Nothing is dropped silently: every input row is in the output or in the errors file.

Engines: ``local`` (the default) runs in this process with pyarrow and no Ray; ``ray`` maps the
dataset over an actor pool with Ray Data (:mod:`jitort.apps.ray`). Both share
:mod:`jitort.apps.rows`: :class:`Predictor`, which turns one Arrow table of rows into one table
of outputs plus a per-row error column, and :class:`Sink`, which numbers rows, applies the error
policy and writes Parquet in order. This module chooses the engine; the engines depend on
``rows``, never on this module.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import jitort
from jitort.apps import ray as jray
# the row format's API, here too: jitort.apps.batch is the module users import
from jitort.apps.rows import (ERROR, ERRORS_FILE, PART_BYTES, ROW, ColumnError,  # noqa: F401
                              InputLayout, Predictor, Sink, arrow_type, check_schema,
                              column_to_numpy, input_files, input_layouts, read_batches,
                              read_output, scan_inputs, to_arrow)


@dataclass
class BatchResult:
    engine: str
    workers: int
    rows: int  # input rows
    written: int  # output rows
    errors: int  # rows in the errors file
    seconds: float  # the whole run, model load and engine start included
    steady_rows_per_s: float  # after the first result arrived
    output: Path

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds else float("nan")


def run(model, input, output, *, engine: str = "local", workers: int | None = None,
        batch_size: int = 256, threads_per_worker: int | None = None, on_error: str = "raise",
        progress: bool | None = None, **compile_options) -> BatchResult:
    """Run ``model`` (a path, bytes, ModelProto or :class:`~jitort.CompiledModel`) over every
    row of the Parquet ``input``; write ``output`` (see the module docstring).

    ``engine="ray"`` ships the model to its workers as bytes with the external data inside (a
    CompiledModel given as ``model`` travels as it pickles: as its path when compiled from
    one). Other keyword arguments go to :func:`jitort.compile`; ``tiered`` defaults to False, so
    that every row comes from the compiled program."""
    if engine not in ("local", "ray"):
        raise ValueError(f"engine must be 'local' or 'ray', got {engine!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if engine == "local" and workers not in (None, 1):
        raise ValueError("--workers applies to --engine ray; the local engine is one process "
                         "(use --threads-per-worker for its threads)")
    t0 = time.perf_counter()
    # every row from the compiled program (not some from the interpreter tier before the switch)
    compile_options.setdefault("tiered", False)
    threads = threads_per_worker if threads_per_worker or engine == "local" else 1
    if engine == "ray":
        jray.require()  # a clear error before anything is read or written
        if not isinstance(model, jitort.CompiledModel):
            model = _portable(model, compile_options.pop("base_dir", None))
    cm = (model if isinstance(model, jitort.CompiledModel)
          else jitort.compile(model, threads=threads, **compile_options))
    layouts = input_layouts(cm)
    files = input_files(input)
    counts = scan_inputs(files, layouts)
    sink = Sink(output, files, counts, on_error, progress, cm.output_names)
    n_workers = 1
    try:
        if engine == "local":
            _run_local(cm, files, sink, batch_size)
        else:
            n_workers = jray.run_files(cm, files, sink, workers=workers, batch_size=batch_size,
                                       threads_per_worker=threads)
    except BaseException:
        sink.close(failed=True)
        raise
    sink.close()
    end = time.perf_counter()
    steady = float("nan")
    if sink.first_result_at is not None and end > sink.first_result_at:
        steady = (sink.rows - min(batch_size, sink.rows)) / (end - sink.first_result_at)
    return BatchResult(engine, n_workers, sink.rows, sink.written, len(sink.errors), end - t0,
                       steady, Path(output))


def _portable(model, base_dir=None):
    """The model as bytes with its external data inside: what the Ray engine ships to its
    workers (a compiled model pickles as its source), so that no node needs the file."""
    from jitort.importer import load_model
    return load_model(model, base_dir).SerializeToString()


def _run_local(cm, files: list[Path], sink: Sink, batch_size: int) -> None:
    predict = Predictor(cm)
    for table in read_batches(files, predict.layouts, batch_size):
        sink.write(predict(table))
