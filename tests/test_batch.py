"""Batch inference over Parquet (issue 23), local engine: rows in, rows out, in order; every
bad row named or recorded, every bad column named. The Ray engine: tests/test_ray.py."""
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import jitort
from jitort.apps import batch, cli

from .helpers import F32, I64, make_model
from .models import shared_path

pa = pytest.importorskip("pyarrow", reason="batch inference needs pyarrow (jitort[batch])")
pq = pytest.importorskip("pyarrow.parquet")

VOCAB = 50
EMB = np.random.default_rng(0).standard_normal((VOCAB, 8)).astype(np.float32)


def seq_model():
    """ids, mask int64 [B, S] -> y = EMB[ids] * mask[..., None] float32 [B, S, 8] and
    n = sum(mask) int64 [B]: a symbolic per-row length, two outputs of different ranks."""
    nodes = [helper.make_node("Gather", ["E", "ids"], ["g"]),
             helper.make_node("Cast", ["mask"], ["mf"], to=F32),
             helper.make_node("Unsqueeze", ["mf", "ax2"], ["mu"]),
             helper.make_node("Mul", ["g", "mu"], ["y"]),
             helper.make_node("ReduceSum", ["mask", "ax1"], ["n"], keepdims=0)]
    return make_model(nodes, [("ids", I64, ["B", "S"]), ("mask", I64, ["B", "S"])],
                      [("y", F32, ["B", "S", 8]), ("n", I64, ["B"])],
                      {"E": EMB, "ax2": np.array([2], np.int64), "ax1": np.array([1], np.int64)})


def seq_reference(ids, mask):
    return EMB[np.asarray(ids)] * np.asarray(mask, np.float32)[:, None], int(np.sum(mask))


def grid_model(dims=(2, 3)):
    """x float32 [B, *dims] -> y = relu(x) * 2 + c (c over the last dim)."""
    c = np.arange(3, dtype=np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "two"], ["m"]),
             helper.make_node("Add", ["m", "c"], ["y"])]
    return make_model(nodes, [("x", F32, ["B", *dims])], [("y", F32, None)],
                      {"two": np.array(2, np.float32), "c": c})


def grid_reference(x):
    return np.maximum(np.asarray(x, np.float32), 0) * 2 + np.arange(3, dtype=np.float32)


@pytest.fixture(scope="module")
def seq(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "seq.onnx"
    onnx.save(seq_model(), str(path))
    return jitort.compile(str(path))


@pytest.fixture(scope="module")
def grid():
    return jitort.compile(grid_model())


def seq_rows(n, seed=0):
    rng = np.random.default_rng(seed)
    ids = [rng.integers(0, VOCAB, int(rng.integers(2, 6))).tolist() for _ in range(n)]
    mask = [[int(v) for v in rng.integers(0, 2, len(r))] for r in ids]
    return ids, mask


def write(path, **columns):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


def run(model, src, out, **kw):
    kw.setdefault("progress", False)
    return batch.run(model, src, out, **kw)


# --- rows in, rows out -------------------------------------------------------------------------

def test_local_engine_rows_in_order_across_files_and_batches(seq, tmp_path):
    ids, mask = seq_rows(100)
    # a folder: files in sorted path order (a nested folder too), _-prefixed files skipped
    write(tmp_path / "in" / "a.parquet", ids=ids[:37], mask=mask[:37])
    write(tmp_path / "in" / "b" / "c.parquet", ids=ids[37:], mask=mask[37:])
    write(tmp_path / "in" / "_ignored.parquet", other=[1])
    res = run(seq, tmp_path / "in", tmp_path / "out", batch_size=16)
    assert (res.rows, res.written, res.errors) == (100, 100, 0)
    out = batch.read_output(tmp_path / "out")
    assert set(out) == {"row", "y", "n"}
    np.testing.assert_array_equal(out["row"], np.arange(100))
    for i in range(100):  # per-row lengths differ: rows of one length run together
        y, n = seq_reference(ids[i], mask[i])
        np.testing.assert_array_equal(out["y"][i], y)
        assert out["n"][i] == n
    assert not (tmp_path / "out" / batch.ERRORS_FILE).exists()


@pytest.mark.parametrize("encoding", ["flat", "nested", "fixed_size_list"])
def test_rows_as_flat_lists_nested_lists_or_fixed_size_lists(grid, tmp_path, encoding):
    x = np.random.default_rng(1).standard_normal((20, 2, 3)).astype(np.float32)
    if encoding == "flat":
        col = x.reshape(20, 6).tolist()
    elif encoding == "nested":
        col = x.tolist()
    else:
        col = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), 6)
    write(tmp_path / "in.parquet", x=col)
    run(grid, tmp_path / "in.parquet", tmp_path / "out", batch_size=8)
    out = batch.read_output(tmp_path / "out")
    assert out["y"].shape == (20, 2, 3)
    np.testing.assert_allclose(out["y"], grid_reference(x), rtol=1e-6)


def test_one_unknown_dim_is_inferred_from_a_flat_list(tmp_path):
    cm = jitort.compile(grid_model(("N", 3)))
    rows = [np.arange(3 * k, dtype=np.float32) - 4 for k in (1, 2, 2, 3)]
    write(tmp_path / "in.parquet", x=[r.tolist() for r in rows])
    run(cm, tmp_path / "in.parquet", tmp_path / "out")
    out = batch.read_output(tmp_path / "out")
    for r, y in zip(rows, out["y"]):
        np.testing.assert_allclose(y, grid_reference(r.reshape(-1, 3)))


def test_int_columns_feed_float_inputs_and_int32_feeds_int64(grid, seq, tmp_path):
    x = np.arange(-6, 6).reshape(2, 6)
    write(tmp_path / "g.parquet", x=pa.array(x.tolist(), pa.list_(pa.int32())))
    run(grid, tmp_path / "g.parquet", tmp_path / "g")
    np.testing.assert_allclose(batch.read_output(tmp_path / "g")["y"],
                               grid_reference(x.reshape(2, 2, 3)))
    write(tmp_path / "s.parquet", ids=pa.array([[1, 2]], pa.list_(pa.int32())), mask=[[1, 1]])
    run(seq, tmp_path / "s.parquet", tmp_path / "s")
    np.testing.assert_array_equal(batch.read_output(tmp_path / "s")["y"][0], EMB[[1, 2]])


def test_a_model_with_batch_dim_fixed_at_one_runs_row_by_row(tmp_path):
    cm = jitort.compile(make_model([helper.make_node("Relu", ["x"], ["y"])],
                                   [("x", F32, [1, 3])], [("y", F32, [1, 3])]))
    write(tmp_path / "in.parquet", x=[[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]])
    run(cm, tmp_path / "in.parquet", tmp_path / "out")
    np.testing.assert_array_equal(batch.read_output(tmp_path / "out")["y"],
                                  [[0, 2, 0], [4, 0, 6]])


def test_cli_batch(seq, tmp_path, capsys):
    ids, mask = seq_rows(30)
    write(tmp_path / "in.parquet", ids=ids, mask=mask)
    model = str(tmp_path / "seq.onnx")
    onnx.save(seq_model(), model)
    assert cli.main(["batch", model, "--input", str(tmp_path / "in.parquet"), "--output",
                     str(tmp_path / "out"), "--batch-size", "8",
                     "--threads-per-worker", "1"]) == 0
    text = capsys.readouterr().out
    assert "30 rows" in text and "30 written" in text and "rows/s" in text
    out = batch.read_output(tmp_path / "out")
    np.testing.assert_array_equal(out["n"], [sum(m) for m in mask])
    # a bad row: exit status 1 and the error on stderr; with --on-error skip it completes
    ids[4] = ids[4] + [1]
    write(tmp_path / "bad.parquet", ids=ids, mask=mask)
    assert cli.main(["batch", model, "--input", str(tmp_path / "bad.parquet"), "--output",
                     str(tmp_path / "bad")]) == 1
    assert "row 4" in capsys.readouterr().err
    assert cli.main(["batch", model, "--input", str(tmp_path / "bad.parquet"), "--output",
                     str(tmp_path / "skip"), "--on-error", "skip"]) == 0
    assert "1 skipped" in capsys.readouterr().out
    assert len(batch.read_output(tmp_path / "skip")["row"]) == 29


# --- bad input: named, or skipped and recorded -------------------------------------------------

def _bad_grid_input(tmp_path):
    """12 rows of 6 values in two files; row 5 (the first file's last) has 5."""
    x = np.random.default_rng(2).standard_normal((12, 6)).astype(np.float32)
    rows = x.tolist()
    rows[5] = rows[5][:5]
    write(tmp_path / "in" / "0.parquet", x=rows[:6])
    write(tmp_path / "in" / "1.parquet", x=rows[6:])
    return x


def test_a_row_of_the_wrong_length_names_the_row_its_file_and_the_column(grid, tmp_path):
    _bad_grid_input(tmp_path)
    with pytest.raises(jitort.InvalidInput) as e:
        run(grid, tmp_path / "in", tmp_path / "out", batch_size=4)
    msg = str(e.value)
    assert msg.startswith("row 5 (") and "0.parquet row 5" in msg
    assert "column 'x' has 5 values" in msg and "[2, 3]" in msg
    assert not list((tmp_path / "out").glob("*.parquet"))  # no partial output left behind


def test_on_error_skip_records_the_row_and_completes_the_rest(grid, tmp_path):
    x = _bad_grid_input(tmp_path)
    res = run(grid, tmp_path / "in", tmp_path / "out", batch_size=4, on_error="skip")
    assert (res.rows, res.written, res.errors) == (12, 11, 1)
    (rec,) = [json.loads(line) for line in
              (tmp_path / "out" / batch.ERRORS_FILE).read_text().splitlines()]
    assert rec["row"] == 5 and rec["file_row"] == 5 and rec["file"].endswith("0.parquet")
    assert "column 'x' has 5 values" in rec["error"]
    out = batch.read_output(tmp_path / "out")
    keep = [i for i in range(12) if i != 5]
    np.testing.assert_array_equal(out["row"], keep)  # every other row, once, in order
    np.testing.assert_allclose(out["y"], grid_reference(x[keep].reshape(11, 2, 3)))


@pytest.mark.parametrize("case", ["missing", "strings", "floats_for_ints", "too_deep"])
def test_a_bad_column_is_named_before_anything_runs(seq, tmp_path, case):
    ids, mask = seq_rows(4)
    cols = {"missing": dict(ids=ids),
            "strings": dict(ids=ids, mask=[str(m) for m in mask]),
            "floats_for_ints": dict(ids=[[float(v) for v in r] for r in ids], mask=mask),
            "too_deep": dict(ids=[[r] for r in ids], mask=mask)}[case]
    write(tmp_path / "in.parquet", **cols)
    want = {"missing": "column 'mask' is missing", "strings": "column 'mask' holds string",
            "floats_for_ints": "column 'ids' holds float64 values, which do not cast to input "
                               "'ids''s int64",
            "too_deep": "column 'ids' holds lists nested 2 deep"}[case]
    for on_error in ("raise", "skip"):  # a column is not a row: skipping does not apply
        with pytest.raises(jitort.InvalidInput, match=want.replace("(", r"\(")):
            run(seq, tmp_path / "in.parquet", tmp_path / f"out-{on_error}", on_error=on_error)
        assert not list((tmp_path / f"out-{on_error}").glob("*.parquet"))


def test_every_kind_of_bad_row_is_recorded(seq, tmp_path):
    ids, mask = seq_rows(10)
    ids[1] = None  # null
    ids[3] = ids[3][:1] + [None] + ids[3][2:]  # a null inside
    mask[5] = mask[5] + [1]  # ids and mask of different lengths: the model refuses the row
    ids[7] = [VOCAB + 9] + ids[7][1:]  # a token id out of range: the model refuses the row
    write(tmp_path / "in.parquet", ids=pa.array(ids, pa.list_(pa.int64())), mask=mask)
    res = run(seq, tmp_path / "in.parquet", tmp_path / "out", on_error="skip")
    assert (res.written, res.errors) == (6, 4)
    recs = {r["row"]: r["error"] for r in map(json.loads, (tmp_path / "out" / batch.ERRORS_FILE)
                                              .read_text().splitlines())}
    assert sorted(recs) == [1, 3, 5, 7]
    assert "column 'ids' is null" in recs[1] and "column 'ids' is null" in recs[3]
    assert "the model refused the row" in recs[5] and "S" in recs[5]
    assert "the model refused the row" in recs[7] and "out of range" in recs[7]
    out = batch.read_output(tmp_path / "out")
    np.testing.assert_array_equal(out["row"], [0, 2, 4, 6, 8, 9])
    for k, i in enumerate(out["row"]):
        np.testing.assert_array_equal(out["y"][k], seq_reference(ids[i], mask[i])[0])
    with pytest.raises(jitort.InvalidInput, match="row 1 .*column 'ids' is null"):
        run(seq, tmp_path / "in.parquet", tmp_path / "raise")


def test_ragged_nested_lists_are_a_row_error(grid, tmp_path):
    write(tmp_path / "in.parquet", x=[[[1, 2, 3], [4, 5, 6]], [[1, 2, 3], [4, 5]]])
    with pytest.raises(jitort.InvalidInput, match="row 1 .*ragged"):
        run(grid, tmp_path / "in.parquet", tmp_path / "out")


def test_input_and_output_paths_are_checked(seq, tmp_path):
    with pytest.raises(jitort.InvalidInput, match="input not found"):
        run(seq, tmp_path / "nope", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(jitort.InvalidInput, match="no Parquet files"):
        run(seq, tmp_path / "empty", tmp_path / "out")
    ids, mask = seq_rows(3)
    write(tmp_path / "in.parquet", ids=ids, mask=mask)
    run(seq, tmp_path / "in.parquet", tmp_path / "out")
    with pytest.raises(jitort.InvalidInput, match="already holds"):
        run(seq, tmp_path / "in.parquet", tmp_path / "out")


# --- bert --------------------------------------------------------------------------------------

def bert_dataset(folder, rows, seq_len=64, files=4, seed=0):
    """``rows`` bert samples (input_ids, attention_mask; the last quarter of every third row
    masked) in ``files`` Parquet files; returns the arrays."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 8000, (rows, seq_len)).astype(np.int64)
    mask = np.ones((rows, seq_len), np.int64)
    mask[::3, seq_len - seq_len // 4:] = 0
    for k in range(files):
        sl = slice(k * rows // files, (k + 1) * rows // files)
        write(Path(folder) / f"part-{k}.parquet", input_ids=batch.to_arrow(ids[sl]),
              attention_mask=batch.to_arrow(mask[sl]))
    return ids, mask


def bert_or_skip() -> Path:
    path = shared_path("bert")
    if not path.exists():
        pytest.skip(f"bert.onnx not found at {path} (set JITORT_MODEL_DIR)")
    return path


def assert_matches_onnxruntime(model_path, ids, mask, out, rows=None):
    """Every row (or the given rows) equal to onnxruntime run on that row alone."""
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    for i in (range(len(ids)) if rows is None else rows):
        ref = sess.run(None, {"input_ids": ids[i:i + 1], "attention_mask": mask[i:i + 1]})[0]
        np.testing.assert_allclose(out[i], ref[0], rtol=1e-4, atol=1e-5, err_msg=f"row {i}")


@pytest.mark.slow
@pytest.mark.models
def test_bert_local_engine_matches_onnxruntime(tmp_path):
    path = bert_or_skip()
    ids, mask = bert_dataset(tmp_path / "in", 256)
    res = run(str(path), tmp_path / "in", tmp_path / "out", batch_size=64)
    assert (res.rows, res.written) == (256, 256)
    out = batch.read_output(tmp_path / "out")
    np.testing.assert_array_equal(out["row"], np.arange(256))
    assert out["out"].shape == (256, 64, 256)
    assert_matches_onnxruntime(path, ids, mask, out["out"])


def test_engine_ray_without_ray_installed_is_a_clear_error(seq, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    monkeypatch.setitem(sys.modules, "ray.data", None)
    ids, mask = seq_rows(3)
    write(tmp_path / "in.parquet", ids=ids, mask=mask)
    with pytest.raises(jitort.JitortError, match=r"pip install 'jitort\[ray\]'"):
        run(seq_model().SerializeToString(), tmp_path / "in.parquet", tmp_path / "out",
            engine="ray")
    assert not (tmp_path / "out").exists()
    run(seq, tmp_path / "in.parquet", tmp_path / "out")  # the local engine needs no Ray
    assert len(batch.read_output(tmp_path / "out")["row"]) == 3
