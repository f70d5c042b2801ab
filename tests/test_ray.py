"""Batch inference on a real local Ray (issue 23): jitort.apps.ray's actor class in Ray Data's
map_batches, ``jitort batch --engine ray`` on 4,096 bert rows against onnxruntime, and a worker
process killed mid-run."""
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import jitort
from jitort.apps import batch

from .test_batch import (EMB, assert_matches_onnxruntime, bert_dataset, bert_or_skip,
                         grid_model, grid_reference, seq_model, seq_reference, seq_rows, write)

ray = pytest.importorskip("ray", reason="Ray is optional: pip install 'jitort[ray]'")
pytest.importorskip("ray.data", reason="Ray Data is optional: pip install 'jitort[ray]'")
pa = pytest.importorskip("pyarrow")

import jitort.apps.ray as jray  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """One local Ray for the module: two CPUs, as the issue asks (this machine has two cores)."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    yield
    ray.shutdown()


def test_the_actor_class_in_map_batches_with_concurrency():
    """The issue's own call: map_batches(JitortPredictor, concurrency=N, batch_size=B)."""
    x = np.random.default_rng(0).standard_normal((40, 2, 3)).astype(np.float32)
    table = pa.table({"x": batch.to_arrow(x)})
    ds = ray.data.from_arrow([table.slice(k, 8) for k in range(0, 40, 8)])  # 5 blocks
    out = ds.map_batches(jray.JitortPredictor,
                         fn_constructor_kwargs={"model": grid_model().SerializeToString(),
                                                "threads": 1},
                         concurrency=2, num_cpus=1, batch_size=8, batch_format="pyarrow")
    rows = out.take_all()
    assert len(rows) == 40 and set(rows[0]) == {"y"}
    got = np.array([r["y"] for r in rows], np.float32)
    want = grid_reference(x)
    # Ray does not promise order here: compare as sets of rows
    order = lambda a: a[np.lexsort(a.reshape(len(a), -1).T)]  # noqa: E731
    np.testing.assert_allclose(order(got), order(want), rtol=1e-6)


def test_map_dataset_records_bad_rows_and_pickles_the_model():
    ids, mask = seq_rows(24)
    ids[3] = ids[3] + [1]  # length differs from its mask: the model refuses the row
    cm = jitort.compile(seq_model(), threads=1)  # travels as bytes + options, rebuilt per actor
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    try:
        table = pa.table({"ids": ids, "mask": mask})
        # four blocks made on the driver: a repartition task here would wait forever for a CPU
        # the two actors hold (ray-project/ray#44687)
        ds = ray.data.from_arrow([table.slice(k, 6) for k in range(0, 24, 6)])
        out = jray.map_dataset(ds, cm, workers=2, batch_size=6, on_error="record")
        tables = list(out.iter_batches(batch_size=None, batch_format="pyarrow"))
    finally:
        ctx.execution_options.preserve_order = False
    table = pa.concat_tables(tables)
    errors = table.column(batch.ERROR).to_pylist()
    assert [i for i, e in enumerate(errors) if e] == [3] and "refused" in errors[3]
    for i in range(24):
        if i != 3:
            y = np.array(table.column("y")[i].as_py(), np.float32).reshape(-1, 8)
            np.testing.assert_array_equal(y, seq_reference(ids[i], mask[i])[0])


def test_engine_ray_numbers_skipped_rows_like_the_local_engine(tmp_path):
    path = tmp_path / "seq.onnx"
    import onnx
    onnx.save(seq_model(), str(path))
    ids, mask = seq_rows(50)
    ids[17] = None
    ids[41] = [len(EMB) + 1]  # out of range
    mask[41] = [1]
    write(tmp_path / "in" / "a.parquet", ids=pa.array(ids[:20], pa.list_(pa.int64())),
          mask=mask[:20])
    write(tmp_path / "in" / "b.parquet", ids=pa.array(ids[20:], pa.list_(pa.int64())),
          mask=mask[20:])
    outs = {}
    for engine in ("local", "ray"):
        res = batch.run(str(path), tmp_path / "in", tmp_path / engine, engine=engine,
                        workers=2 if engine == "ray" else None, batch_size=8,
                        on_error="skip", progress=False)
        assert (res.rows, res.written, res.errors) == (50, 48, 2)
        outs[engine] = batch.read_output(tmp_path / engine)
        errs = (tmp_path / engine / batch.ERRORS_FILE).read_text()
        assert '"row": 17' in errs and '"row": 41, "file": ' in errs and '"file_row": 21' in errs
    np.testing.assert_array_equal(outs["ray"]["row"], outs["local"]["row"])
    for a, b in zip(outs["ray"]["y"], outs["local"]["y"]):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(jitort.InvalidInput, match="row 17 .*column 'ids' is null"):
        batch.run(str(path), tmp_path / "in", tmp_path / "raise", engine="ray", workers=2,
                  batch_size=8, progress=False)


@pytest.fixture(scope="module")
def bert_warm():
    """bert compiled here first (1 thread, as the workers run it), so that the two actors load
    its code from the on-disk cache instead of both compiling it on a cold machine."""
    path = bert_or_skip()
    cm = jitort.compile(str(path), threads=1)
    cm(np.zeros((2, 64), np.int64), np.ones((2, 64), np.int64))
    return path


@pytest.mark.slow
@pytest.mark.models
def test_bert_4096_rows_on_ray_match_onnxruntime(tmp_path, bert_warm):
    """Must-show 1: 4,096 bert rows (S = 64), Parquet in, Parquet out on ray.init(num_cpus=2):
    every row once, in order, equal to onnxruntime's output for that row (rtol 1e-4)."""
    path = bert_warm
    ids, mask = bert_dataset(tmp_path / "in", 4096)
    res = batch.run(str(path), tmp_path / "in", tmp_path / "out", engine="ray", workers=2,
                    threads_per_worker=1, batch_size=128, progress=False)
    print(f"bert 4096 rows on Ray, 2 workers: {res.seconds:.1f} s, {res.rows_per_s:.0f} rows/s "
          f"({res.steady_rows_per_s:.0f} after the first result)")
    assert (res.rows, res.written, res.errors, res.workers) == (4096, 4096, 0, 2)
    out = batch.read_output(tmp_path / "out")
    np.testing.assert_array_equal(out["row"], np.arange(4096))
    assert out["out"].shape == (4096, 64, 256)
    assert_matches_onnxruntime(path, ids, mask, out["out"])


def _actor_pids() -> list[int]:
    """Processes of jitort's Ray Data actors (their title names the callable class) that
    descend from this process (the local Ray it started), never another session's."""
    parent, actors = {}, []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
                parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if b"MapBatches(JitortPredictor)" in cmd:
                actors.append(int(d.name))

    def ours(pid):
        while pid > 1:
            pid = parent.get(pid, 0)
            if pid == os.getpid():
                return True
        return False
    return [pid for pid in actors if ours(pid)]


@pytest.mark.slow
@pytest.mark.models
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the worker process in /proc")
def test_a_worker_killed_mid_run_still_gives_every_row_once(tmp_path, bert_warm):
    """Must-show 3: SIGKILL one actor process once results flow; Ray Data restarts it and
    resubmits its batches; the output still has every row exactly once, in order, and equal
    to the model's output."""
    path = bert_warm
    rows = 1024
    ids, mask = bert_dataset(tmp_path / "in", rows, files=2)
    result, failure = {}, []

    def work():
        try:
            result["res"] = batch.run(str(path), tmp_path / "in", tmp_path / "out",
                                      engine="ray", workers=2, threads_per_worker=1,
                                      batch_size=32, progress=False)
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            failure.append(e)

    t = threading.Thread(target=work)
    t.start()
    first_part = tmp_path / "out" / "part-00000.parquet"
    deadline = time.monotonic() + 300
    while not first_part.exists() and t.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = _actor_pids()
    assert pids and t.is_alive(), (pids, failure)
    os.kill(pids[0], signal.SIGKILL)
    assert t.is_alive()  # the kill landed mid-run
    t.join(600)
    assert not failure, failure
    res = result["res"]
    assert (res.rows, res.written, res.errors) == (rows, rows, 0)
    assert pids[0] not in _actor_pids()
    out = batch.read_output(tmp_path / "out")
    np.testing.assert_array_equal(out["row"], np.arange(rows))  # each row once, in order
    cm = jitort.compile(str(path), threads=1)
    for s in range(0, rows, 256):
        ref = cm(ids[s:s + 256], mask[s:s + 256])[0]
        np.testing.assert_allclose(out["out"][s:s + 256], ref, rtol=1e-4, atol=1e-5)


PIN_CHILD = """
import os, sys
os.environ.pop("NUMBA_NUM_THREADS", None)
if sys.argv[1] == "started":
    import jitort.kernels.cpu  # starts Numba's pool, as an actor's unpickling of jitort does
from jitort.apps.ray import pin_threads
limits = pin_threads(1)
import numba
@numba.njit
def fresh(x):  # a compilation after the pin: Numba re-reads NUMBA_NUM_THREADS here
    return x + 1
assert fresh(1) == 2 and numba.get_num_threads() == 1
print("ok", os.environ["NUMBA_NUM_THREADS"], numba.config.NUMBA_NUM_THREADS)
"""


@pytest.mark.parametrize("pool", ["started", "not started"])
def test_pinned_worker_can_still_compile(pool):
    """A worker pins its threads (jitort.apps.ray.pin_threads) and then has to compile (a cold
    cache): Numba refused every compilation ("Cannot set NUMBA_NUM_THREADS to a different value
    once the threads have been launched") whether its pool had started before the pin (the
    environment then said 1, the pool 2) or started after it (from the stale setting)."""
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-c", PIN_CHILD, pool], capture_output=True, text=True,
                       timeout=300, cwd="/")
    assert p.returncode == 0, p.stdout + p.stderr
    _, env, size = p.stdout.split()
    assert env == size  # what a later compilation reads is the pool's size
