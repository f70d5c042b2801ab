"""Batch inference on Ray Data (the optional extra ``pip install 'jitort[ray]'``).

One compiled model per actor of a Ray Data actor pool; Ray Data schedules, retries and streams.
:class:`JitortPredictor` is the callable class for ``map_batches``::

    import ray, jitort.apps.ray
    ds = ray.data.read_parquet("tokens/")            # columns named after the model's inputs
    out = ds.map_batches(jitort.apps.ray.JitortPredictor,
                         fn_constructor_kwargs={"model": "bert.onnx", "threads": 1},
                         concurrency=2, num_cpus=1, batch_size=256, batch_format="pyarrow")

(Ray >= 2.51 warns that ``concurrency=N`` is deprecated for
``compute=ray.data.ActorPoolStrategy(size=N)``, which :func:`map_dataset` uses; with two actors
of one CPU on a 2-CPU Ray, ``materialize()`` the read first: see below)

or :func:`map_dataset` (the same with the pool and thread settings filled in). Rows are read as
in :mod:`jitort.apps.batch` (one sample per row, lists reshaped to the per-sample shape) and each
output comes back as a column of nested lists. ``model`` may be a path (every node must see it),
bytes, or a :class:`~jitort.CompiledModel`, which pickles as its source and compile options and
loads its compiled code from the node's on-disk cache (:mod:`jitort.serialize`).

Threads: each actor reserves ``threads`` CPUs from Ray and runs the model on that many Numba
threads, with the BLAS libraries limited to as many, so that ``workers x threads`` fits the
cores instead of every actor spinning a thread per core.

Fault tolerance is Ray Data's: its actor pools restart a dead actor (``max_restarts=-1``) and
resubmit the batches it held (``max_task_retries=-1``), so every row comes out once.

An actor pool that takes every CPU leaves none for upstream read or write tasks, and the dataset
hangs (https://github.com/ray-project/ray/issues/44687). :func:`run_files` (``jitort batch
--engine ray``) therefore reads the input on the driver, one block of ``batch_size`` rows at a
time put into Ray's object store (the driver reads the Parquet footers anyway: it checks every
file's columns before anything runs), and writes the results from the driver in input order:
no Ray task besides the actors'. On this 2-core machine that starts in 0.1 s where
``read_parquet(...).repartition(n).materialize()`` took 0.9-2.4 s.
"""
from __future__ import annotations

import logging
import os
from typing import Any

import jitort
from jitort.apps import rows as _rows
from jitort.errors import InvalidInput, JitortError


def require():
    """The ``ray`` module, Ray Data loaded; :class:`~jitort.JitortError` if not installed."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise JitortError("jitort.apps.ray needs Ray Data, which is not installed: "
                          "pip install 'jitort[ray]'") from None
    return ray


def thread_env(threads: int) -> dict[str, str]:
    """Environment that caps every thread pool of a worker process at ``threads``."""
    t = str(int(threads))
    return {"NUMBA_NUM_THREADS": t, "OMP_NUM_THREADS": t, "OPENBLAS_NUM_THREADS": t,
            "MKL_NUM_THREADS": t}


def pin_threads(threads: int):
    """Cap this process's thread pools at ``threads``: Numba's thread count, the BLAS libraries
    already loaded (threadpoolctl) and the environment (libraries loaded later, child processes
    such as tiered compilation's; ``NUMBA_NUM_THREADS`` only while Numba's pool is not started).
    Returns the threadpoolctl limiter (keep it alive).

    Not a ``runtime_env``: a worker with its own environment cannot come from Ray's pool of
    started workers, which cost 1-3 s more per actor start here."""
    env = thread_env(threads)
    import numba
    from numba.np.ufunc import parallel
    if parallel._is_initialized:
        # Numba's pool is already started (importing jitort's kernels starts it): every later
        # compilation re-reads NUMBA_NUM_THREADS and refuses a value other than the pool's
        # size ("Cannot set NUMBA_NUM_THREADS to a different value once the threads have been
        # launched"), so a worker that had to compile a kernel failed. The pool keeps its
        # size; set_num_threads below caps what this process uses.
        env["NUMBA_NUM_THREADS"] = str(numba.config.NUMBA_NUM_THREADS)
    os.environ.update(env)
    # Numba reads its environment at import and at each compilation: a pool started now (by
    # set_num_threads or the kernels' import) takes the size just set, not the stale one
    numba.core.config.reload_config()
    from threadpoolctl import threadpool_limits
    numba.set_num_threads(max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS)))
    return threadpool_limits(limits=int(threads))


class JitortPredictor:
    """Callable class for ``Dataset.map_batches``: one compiled model per actor.

    ``model``: a path, bytes, ModelProto or :class:`~jitort.CompiledModel` (then its own
    compile options hold, ``threads`` included). ``threads``: Numba/BLAS threads of this actor
    (reserve as many with ``num_cpus``). ``on_error``: ``"raise"`` (a row that cannot run fails
    the batch with :class:`~jitort.InvalidInput` naming its position in the batch) or
    ``"record"`` (keep every row; the column ``jitort.apps.batch.ERROR`` holds the message, null
    where the row ran, and the outputs are null on failed rows). Other keyword arguments go to
    :func:`jitort.compile`.

    Batches may come as pyarrow Tables (``batch_format="pyarrow"``, the fastest), pandas
    DataFrames or dicts of numpy arrays; the result is a pyarrow Table.
    """

    def __init__(self, model: Any, threads: int = 1, on_error: str = "raise",
                 **compile_options):
        if on_error not in ("raise", "record"):
            raise ValueError(f"on_error must be 'raise' or 'record', got {on_error!r}")
        self._limits = pin_threads(threads)
        compile_options.setdefault("tiered", False)  # every row from the compiled program
        self.model = (model if isinstance(model, jitort.CompiledModel)
                      else jitort.compile(model, threads=threads, **compile_options))
        self.predict = _rows.Predictor(self.model)
        self.on_error = on_error

    def __call__(self, batch):
        out = self.predict(_as_table(batch))
        if self.on_error == "record":
            return out
        err = out.column(_rows.ERROR)
        if err.null_count != len(err):
            i = next(k for k, m in enumerate(err.to_pylist()) if m is not None)
            raise InvalidInput(f"row {i} of this batch: {err[i].as_py()}")
        return out.drop_columns([_rows.ERROR])


def _as_table(batch):
    import numpy as np
    import pyarrow as pa
    if isinstance(batch, pa.Table):
        return batch
    if isinstance(batch, dict):  # batch_format="numpy": arrays [n, ...] or object arrays
        cols = {}
        for name, col in batch.items():
            col = np.asarray(col)
            cols[name] = (pa.array(list(col)) if col.dtype == object
                          else _rows.to_arrow(col))
        return pa.table(cols)
    return pa.Table.from_pandas(batch, preserve_index=False)


def map_dataset(ds, model: Any, *, workers: int | None = None, batch_size: int = 256,
                threads_per_worker: int = 1, on_error: str = "raise", **compile_options):
    """``ds`` mapped through ``model`` by a fixed pool of ``workers`` actors (default: the
    cluster's CPUs // ``threads_per_worker``), each reserving and using
    ``threads_per_worker`` CPUs. Returns the (lazy) Dataset: the input's rows as output
    columns of nested lists, plus :data:`jitort.apps.batch.ERROR` when ``on_error="record"``.

    Rows come out in input order only with ``DataContext.execution_options.preserve_order``.
    If ``workers x threads_per_worker`` is every CPU of the cluster, ``materialize()`` ``ds``
    first: its read tasks would wait for a CPU forever (see the module docstring)."""
    ray = require()
    threads = int(threads_per_worker)
    if workers is None:
        workers = max(1, int(ray.cluster_resources().get("CPU", 1)) // threads)
    return ds.map_batches(
        JitortPredictor,
        fn_constructor_kwargs=dict(model=model, threads=threads, on_error=on_error,
                                   **compile_options),
        compute=ray.data.ActorPoolStrategy(size=int(workers)),
        batch_size=batch_size, batch_format="pyarrow", num_cpus=threads)


def run_files(cm, files, sink, *, workers: int | None, batch_size: int,
              threads_per_worker: int) -> int:
    """``jitort batch --engine ray``: the Parquet ``files`` through ``cm`` on Ray Data, results
    into ``sink`` (:class:`jitort.apps.rows.Sink`) in input order. Joins the cluster at
    ``RAY_ADDRESS`` or starts a local Ray unless Ray is already initialized. Returns the number
    of workers."""
    ray = require()
    started = not ray.is_initialized()
    if started:
        # "local": a new instance, not a cluster that `ray start` left running on this machine
        ray.init(address=os.environ.get("RAY_ADDRESS") or "local", include_dashboard=False,
                 logging_level=logging.WARNING)
    ctx = ray.data.DataContext.get_current()
    saved = ctx.execution_options.preserve_order, ctx.enable_progress_bars
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False  # jitort's own bar counts rows on the driver
    data_log = logging.getLogger("ray.data")
    saved_level = data_log.level
    data_log.setLevel(max(saved_level, logging.WARNING))
    try:
        threads = int(threads_per_worker)
        if workers is None:
            workers = max(1, int(ray.cluster_resources().get("CPU", 1)) // threads)
        if sink.total == 0:
            return workers
        ds = ray.data.from_arrow_refs(
            [ray.put(t) for t in _rows.read_batches(files, _rows.input_layouts(cm), batch_size)])
        out = map_dataset(ds, cm, workers=workers, batch_size=batch_size,
                          threads_per_worker=threads, on_error="record")
        for table in out.iter_batches(batch_size=None, batch_format="pyarrow"):
            sink.write(table)
        return workers
    finally:
        ctx.execution_options.preserve_order, ctx.enable_progress_bars = saved
        data_log.setLevel(saved_level)
        if started:
            ray.shutdown()
