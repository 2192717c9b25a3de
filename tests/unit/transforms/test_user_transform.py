"""``transform=``: the user's Python function on each decoded row group, in the engine's workers.

Checked: its output equals applying it row group by row group in plain pyarrow/numpy (bytes);
order and thread-count invariance; the cache (warm epochs do not call it; transform_version
misses); schema, exception and row-count errors naming the key, file and row group; outputs
feeding features= and a native chain; prompt break/close/del, a second thread, DataLoader
workers, interpreter exit; Petastorm's TransformSpec against Petastorm's own schema rules.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import threading
import time
import types

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker import to_pylist
from stoker._user_transform import arrow_to_numpy, fingerprint
from stoker.errors import (ColumnNotFoundError, InvalidOptionError, LoaderClosedError,
                           TransformError)
from stoker_testdata import digest

pytestmark = pytest.mark.timeout(120)

ROWS_PER_FILE = (300, 250)
ROW_GROUP = 64


def Loader(source, **options):
    """stoker.Loader with batches small enough for the small test datasets."""
    options.setdefault("batch_size", 50)
    return stoker.Loader(source, **options)


@pytest.fixture
def dataset(tmp_path):
    """Two files, uneven row groups: id, x (float32), cat (str), vec (float32[4]), tags (list)."""
    root = tmp_path / "ds"
    root.mkdir()
    start = 0
    for index, rows in enumerate(ROWS_PER_FILE):
        ids = np.arange(start, start + rows, dtype=np.int64)
        rng = np.random.default_rng(index)
        table = pa.table({
            "id": ids,
            "x": rng.standard_normal(rows).astype(np.float32),
            "cat": [f"c{i % 7}" for i in ids],
            "vec": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.standard_normal(rows * 4).astype(np.float32)), 4),
            "tags": pa.array([list(range(i % 4)) for i in ids], type=pa.list_(pa.int32())),
        })
        pq.write_table(table, root / f"part-{index}.parquet", row_group_size=ROW_GROUP)
        start += rows
    return str(root)


def row_groups(root):
    """Every row group's table, in stoker's catalog order (sorted files)."""
    out = []
    for name in sorted(os.listdir(root)):
        file = pq.ParquetFile(os.path.join(root, name))
        for index in range(file.num_row_groups):
            out.append(file.read_row_group(index))
    return out


def features_fn(arrays):
    """A transform with numeric, tensor, string and derived outputs."""
    x = arrays["x"]
    return {
        "id": arrays["id"],
        "y": (x.astype(np.float64) * 2 + arrays["id"]).astype(np.float64),
        "img": (arrays["vec"].reshape(-1, 2, 2) * 3).astype(np.float32),
        "label": np.array([s.upper() for s in arrays["cat"]], dtype=object),
        "n_tags": np.array([len(t) for t in arrays["tags"]], dtype=np.int32),
    }


def collect(loader, keys):
    out = {key: [] for key in keys}
    for batch in loader:
        for key in keys:
            value = batch[key]
            out[key].extend(to_pylist(value)) if isinstance(value, stoker.Ragged) else \
                out[key].append(np.array(value, copy=True))
    return {key: (np.concatenate(v) if v and isinstance(v[0], np.ndarray) else v)
            for key, v in out.items()}


def test_output_equals_fn_applied_per_row_group(dataset):
    keys = ["id", "y", "img", "label", "n_tags"]
    with Loader(dataset, transform=features_fn, shuffle=False, batch_size=50,
                       drop_last=False, num_threads=3) as loader:
        assert set(loader.columns) == set(keys)
        assert loader.columns["img"].inner_shape == [2, 2]
        got = collect(loader, keys)
    reference = [features_fn(arrow_to_numpy(t.combine_chunks().to_batches()[0]))
                 for t in row_groups(dataset)]
    for key in ("id", "y", "img", "n_tags"):
        expected = np.concatenate([r[key] for r in reference])
        assert got[key].dtype == expected.dtype, key
        assert got[key].tobytes() == expected.tobytes(), key
    assert got["label"] == [s for r in reference for s in r["label"]]


def test_input_conversion(dataset):
    seen = {}

    def fn(arrays):
        seen.update({k: (type(v), v.dtype, v.shape) for k, v in arrays.items()})
        seen["tag_cell"] = type(arrays["tags"][1])
        return {"id": arrays["id"]}

    with Loader(dataset, transform=fn, shuffle=False) as loader:
        pass
    assert seen["id"][1:] == (np.dtype(np.int64), (64,))  # the probe: first 64 rows
    assert seen["vec"][1:] == (np.dtype(np.float32), (64, 4))
    assert seen["cat"][1] == np.dtype(object) and seen["tags"][1] == np.dtype(object)
    assert seen["tag_cell"] is np.ndarray


def test_nulls_arrive_as_masked_arrays(write_parquet):
    values = pa.array([1, None, 3, None, 2**60], type=pa.int64())
    path = write_parquet({"v": values, "s": pa.array(["a", None, "c", "d", None])})
    seen = {}

    def fn(arrays):
        seen["v"], seen["s"] = arrays["v"], arrays["s"]
        return {"v": arrays["v"].filled(-1), "s_null": np.array([s is None for s in arrays["s"]])}

    with Loader(path, transform=fn, shuffle=False, batch_size=5) as loader:
        batch = next(iter(loader))
    assert isinstance(seen["v"], np.ma.MaskedArray) and seen["v"].dtype == np.int64
    assert seen["v"].mask.tolist() == [False, True, False, True, False]
    assert seen["v"][4] == 2**60  # not through float
    assert seen["s"].tolist() == ["a", None, "c", "d", None]
    assert batch["v"].tolist() == [1, -1, 3, -1, 2**60]
    assert batch["s_null"].tolist() == [False, True, False, False, True]


def test_masked_output_becomes_nulls_for_fill_null_and_null_mask(dataset):
    def fn(arrays):
        x = np.ma.MaskedArray(arrays["x"], mask=arrays["id"] % 3 == 0)
        return {"id": arrays["id"], "x": x}

    with Loader(dataset, transform=fn, shuffle=False, batch_size=64, null_mask=["x"],
                       drop_last=False) as loader:
        got = collect(loader, ["id", "x", "x_mask"])
    assert got["x_mask"].tolist() == (got["id"] % 3 != 0).tolist()
    assert (got["x"][~got["x_mask"]] == 0).all()


def test_identity_transform_keeps_order_and_bytes(dataset):
    common = dict(columns=["id", "x", "vec"], shuffle=True, seed=7, batch_size=40,
                  shuffle_window=100)
    with Loader(dataset, **common) as plain, \
            Loader(dataset, transform=lambda a: dict(a), **common) as identity:
        assert digest(identity) == digest(plain)


def test_thread_count_invariance(dataset):
    common = dict(transform=features_fn, columns=["id", "y", "img", "n_tags"], seed=3,
                  batch_size=32, shuffle_window=90)
    with Loader(dataset, num_threads=1, **common) as one, \
            Loader(dataset, num_threads=4, **common) as four:
        assert digest(one) == digest(four)


class Counting:
    """A transform that counts its calls (thread-safe)."""

    def __init__(self, scale=2.0):
        self.scale = scale
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, arrays):
        with self._lock:
            self.calls += 1
        return {"id": arrays["id"], "z": arrays["x"] * np.float32(self.scale)}


def test_cache_warm_epochs_do_not_call_fn(dataset, tmp_path):
    cache = str(tmp_path / "cache")
    groups = len(row_groups(dataset))
    fn = Counting()
    with Loader(dataset, transform=fn, cache_dir=cache, shuffle=False,
                       batch_size=50) as loader:
        assert fn.calls == 1  # the probe at open
        first = digest(loader)
        assert fn.calls == 1 + groups
        second = digest(loader)
        assert fn.calls == 1 + groups  # served from the cache
        assert second == first
    # Another loader with the same function: only its probe runs.
    fn_again = Counting()
    with Loader(dataset, transform=fn_again, cache_dir=cache, shuffle=False,
                       batch_size=50) as loader:
        assert digest(loader) == first
        assert fn_again.calls == 1
    # transform_version forces a miss.
    versioned = Counting()
    with Loader(dataset, transform=versioned, cache_dir=cache, shuffle=False,
                       batch_size=50, transform_version="v2") as loader:
        assert digest(loader) == first
        assert versioned.calls == 1 + groups
    # So does a change of a parameter the function reads from its own state.
    scaled = Counting(scale=3.0)
    with Loader(dataset, transform=scaled, cache_dir=cache, shuffle=False,
                       batch_size=50) as loader:
        assert digest(loader) != first
        assert scaled.calls == 1 + groups


def test_fingerprint_covers_code_constants_defaults_closures():
    def make(k):
        def fn(arrays, offset=1):
            return {"a": arrays["a"] * k + offset}
        return fn

    assert fingerprint(make(2)) == fingerprint(make(2))
    assert fingerprint(make(2)) != fingerprint(make(3))
    assert fingerprint(make(2)) != fingerprint(make(2), "v2")

    def other(arrays, offset=1):
        return {"a": arrays["a"] * 2 + offset + 1}

    assert fingerprint(other) != fingerprint(make(2))


def test_fingerprint_is_in_resume_state(dataset):
    with Loader(dataset, transform=Counting(), seed=1) as a, \
            Loader(dataset, transform=Counting(), seed=1, transform_version="v2") as b:
        assert a._engine.fingerprint != b._engine.fingerprint
        state = a.state_dict()
        with pytest.raises(stoker.errors.StateMismatchError):
            b.load_state_dict(state)


def test_schema_change_on_a_later_row_group_names_key_and_row_group(dataset):
    def fn(arrays):
        late = arrays["id"][0] >= 128
        return {"id": arrays["id"], "y": arrays["x"].astype(np.float64 if late else np.float32)}

    with Loader(dataset, transform=fn, shuffle=False, num_threads=1) as loader:
        with pytest.raises(TransformError) as error:
            for _ in loader:
                pass
    message = str(error.value)
    assert "'y'" in message and "float64" in message and "float32" in message
    assert "part-0.parquet" in message and "row group 2" in message


def test_missing_key_later_is_an_error(dataset):
    def fn(arrays):
        out = {"id": arrays["id"]}
        if arrays["id"][0] < 64:
            out["extra"] = arrays["x"]
        return out

    with Loader(dataset, transform=fn, shuffle=False, num_threads=1,
                       columns=["id"]) as loader:
        with pytest.raises(TransformError, match="row group 1: transform= did not return key 'extra'"):
            list(loader)


def test_exception_in_fn_names_file_row_group_and_exception(dataset):
    def fn(arrays):
        if arrays["id"][0] == 300:  # the first row group of the second file
            raise ValueError("boom in user code")
        return {"id": arrays["id"]}

    with Loader(dataset, transform=fn, shuffle=False) as loader:
        with pytest.raises(TransformError) as error:
            list(loader)
    message = str(error.value)
    assert "part-1.parquet" in message and "row group 0" in message
    assert "ValueError" in message and "boom in user code" in message


def test_exception_at_open_is_a_transform_error(dataset):
    def fn(arrays):
        raise KeyError("nope")

    with pytest.raises(TransformError, match="part-0.parquet.*row group 0.*KeyError"):
        Loader(dataset, transform=fn)


def test_row_count_change_is_an_error(dataset):
    with pytest.raises(TransformError, match="'id'.*rows"):
        Loader(dataset, transform=lambda a: {"id": a["id"][:-1]})
    with pytest.raises(TransformError, match="'s'.*scalar"):
        Loader(dataset, transform=lambda a: {"id": a["id"], "s": np.float32(1)})
    with pytest.raises(TransformError, match="must return a dict"):
        Loader(dataset, transform=lambda a: [a["id"]])


def test_outputs_feed_features_and_native_chains(dataset):
    def fn(arrays):
        return {"id": arrays["id"], "a": arrays["x"], "b": arrays["x"] * np.float32(2),
                "price": (arrays["id"] % 10).astype(np.float32)}

    with Loader(dataset, transform=fn, shuffle=False, columns=["id", "price"],
                       features=["a", "b"], batch_size=100, drop_last=False,
                       transforms={"price": [stoker.ops.standardize(4.5, 2.0)]}) as loader:
        got = collect(loader, ["id", "price", "features"])
    x = np.concatenate([t.column("x").to_numpy() for t in row_groups(dataset)])
    assert got["features"].shape == (len(x), 2)
    assert got["features"][:, 0].tobytes() == x.tobytes()
    assert got["features"][:, 1].tobytes() == (x * np.float32(2)).tobytes()
    expected = ((got["id"] % 10).astype(np.float32) - np.float32(4.5)) / np.float32(2.0)
    np.testing.assert_allclose(got["price"], expected, rtol=1e-6)


def test_option_errors(dataset):
    with pytest.raises(ColumnNotFoundError, match="transform_columns.*'nope'"):
        Loader(dataset, transform=lambda a: dict(a), transform_columns=["nope"])
    with pytest.raises(InvalidOptionError, match="need transform"):
        Loader(dataset, transform_columns=["id"])
    with pytest.raises(InvalidOptionError, match="callable"):
        Loader(dataset, transform=42)
    with pytest.raises(ColumnNotFoundError, match="'x'.*transform=.*available columns: id"):
        Loader(dataset, transform=lambda a: {"id": a["id"]}, columns=["x"])


def test_transform_columns_limits_the_input(dataset):
    seen = []

    def fn(arrays):
        seen.append(sorted(arrays))
        return {"double": arrays["id"] * 2}

    with Loader(dataset, transform=fn, transform_columns=["id"], shuffle=False,
                       batch_size=100, drop_last=False) as loader:
        got = collect(loader, ["double"])
    assert all(keys == ["id"] for keys in seen)
    assert got["double"].tolist() == list(range(0, 2 * sum(ROWS_PER_FILE), 2))


def slow(arrays):
    time.sleep(0.3)
    return {"id": arrays["id"]}


def test_break_close_and_del_while_fn_is_slow(dataset):
    loader = Loader(dataset, transform=slow, num_threads=2, batch_size=16)
    for _ in loader:
        break
    loader.close()
    with pytest.raises(LoaderClosedError):
        next(iter(loader))
    other = Loader(dataset, transform=slow, num_threads=2, batch_size=16)
    iterator = iter(other)
    next(iterator)
    del iterator, other  # returns: the workers finish their current call and stop


def test_close_from_another_thread_while_fn_runs(dataset):
    loader = Loader(dataset, transform=slow, num_threads=2, batch_size=16)
    errors = []

    def consume():
        try:
            for _ in loader:
                pass
        except LoaderClosedError as error:
            errors.append(error)

    thread = threading.Thread(target=consume)
    thread.start()
    time.sleep(0.5)
    loader.close()
    thread.join(60)
    assert not thread.is_alive()
    assert len(errors) == 1


def test_iterating_from_a_second_thread(dataset):
    out = {}

    def consume():
        with Loader(dataset, transform=features_fn, columns=["id"], shuffle=False,
                           drop_last=False, batch_size=100) as loader:
            out["ids"] = np.concatenate([np.array(b["id"]) for b in loader])

    thread = threading.Thread(target=consume)
    thread.start()
    thread.join(60)
    assert out["ids"].tolist() == list(range(sum(ROWS_PER_FILE)))


def test_interpreter_exit_with_slow_fn_in_flight(dataset):
    script = textwrap.dedent(f"""
        import threading, time, stoker
        def slow(arrays):
            time.sleep(0.2)
            return {{"id": arrays["id"]}}
        loader = stoker.Loader({dataset!r}, transform=slow, num_threads=2, batch_size=8)
        def consume():
            for _ in loader:
                pass
        threading.Thread(target=consume, daemon=True).start()
        time.sleep(0.5)
        print("exiting", flush=True)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "exiting" in result.stdout
    assert "nanobind: leaked" not in result.stderr, result.stderr[-2000:]


def test_fork_mid_epoch_child_gets_closed_error_parent_continues(dataset, tmp_path):
    script = tmp_path / "fork_scenario.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys, stoker
        from stoker.errors import LoaderClosedError

        def fn(arrays):
            return {{"id": arrays["id"], "twice": arrays["id"] * 2}}

        loader = stoker.Loader({dataset!r}, transform=fn, batch_size=10, shuffle=False,
                               num_threads=2)
        it = iter(loader)
        first = next(it)
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                next(it)
            except LoaderClosedError as error:
                code = 0 if "inherited through fork()" in str(error) else 4
            # A loader made in the child runs its own transform.
            with stoker.Loader({dataset!r}, transform=fn, batch_size=10, shuffle=False) as own:
                batch = next(iter(own))
                if batch["twice"].tolist() != [2 * i for i in batch["id"].tolist()]:
                    code = 5
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        rows = len(first["id"]) + sum(len(b["id"]) for b in it)
        print("RESULT", os.waitstatus_to_exitcode(status), rows, flush=True)
    """))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=90)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "nanobind: leaked" not in result.stderr, result.stderr[-2000:]
    assert f"RESULT 0 {sum(ROWS_PER_FILE)}" in result.stdout, result.stdout + result.stderr


def _ids_fn(arrays):
    return {"id": arrays["id"], "id2": arrays["id"] * 2}


def test_in_torch_dataloader_workers(dataset):
    torch = pytest.importorskip("torch")
    data = stoker.IterableDataset(dataset, transform=_ids_fn, columns=["id", "id2"],
                                  batch_size=25, shuffle=False, drop_last=False, num_threads=2,
                                  seed=0)
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=2, timeout=60)
    ids = []
    for batch in loader:
        assert torch.equal(batch["id2"], batch["id"] * 2)
        ids.extend(batch["id"].tolist())
    assert sorted(ids) == list(range(sum(ROWS_PER_FILE)))


# ------------------------------------------------------------------------------ TransformSpec

def _import_petastorm():
    """petastorm.transform and unischema; petastorm 0.13 imports pyarrow modules that pyarrow
    removed (only for its filesystem helpers), so those are stubbed when missing."""
    if importlib.util.find_spec("petastorm") is None:
        pytest.skip("petastorm is not installed")
    for name, attr in (("pyarrow.filesystem", "LocalFileSystem"), ("pyarrow.hdfs",
                                                                   "HadoopFileSystem")):
        try:
            __import__(name)
        except ImportError:
            stub = types.ModuleType(name)
            setattr(stub, attr, type(attr, (), {}))
            sys.modules[name] = stub
    from petastorm import transform, unischema
    return transform, unischema


def _spec_func(frame):
    frame = frame.copy()
    frame["x2"] = frame["x"] * 2
    frame["grid"] = frame["id"].map(lambda i: np.full((2, 3), i, dtype=np.int64))
    frame["cat"] = frame["cat"].str.upper()
    return frame


def _petastorm_reference(table, spec, transform_module, unischema_module):
    """What Petastorm's batch reader (arrow_reader_worker._load_rows) makes of one row group,
    with the output schema from petastorm.transform.transform_schema."""
    fields = [unischema_module.UnischemaField(name, np.dtype(object), (), None, True)
              for name in table.column_names]
    schema = transform_module.transform_schema(unischema_module.Unischema("s", fields), spec)
    frame = table.to_pandas()
    result = spec.func(frame) if spec.func else frame
    for name in set(result.columns) & set(spec.removed_fields):
        del result[name]
    assert set(result.columns) == set(schema.fields)
    return list(schema.fields), result


@pytest.mark.parametrize("mode", ["stoker", "petastorm"])
def test_transform_spec_matches_petastorm(dataset, mode):
    transform_module, unischema_module = _import_petastorm()
    edit = [("x2", np.float32, (), False), ("grid", np.int64, (2, 3), False)]
    if mode == "stoker":
        spec = stoker.TransformSpec(_spec_func, edit_fields=edit, removed_fields=["vec", "tags"])
    else:  # Petastorm's own class and UnischemaFields, duck-typed
        spec = transform_module.TransformSpec(
            _spec_func, edit_fields=[unischema_module.UnischemaField(n, d, s, None, b)
                                     for n, d, s, b in edit],
            removed_fields=["vec", "tags"])
    with Loader(dataset, transform=spec, shuffle=False, batch_size=1000,
                       drop_last=False, transform_columns=["id", "x", "cat", "vec", "tags"]) \
            as loader:
        names = list(loader.columns)
        got = collect(loader, names)
    reference = [_petastorm_reference(t.drop_columns([]), spec, transform_module,
                                      unischema_module) for t in row_groups(dataset)]
    expected_names = reference[0][0]
    assert names == expected_names == ["id", "x", "cat", "x2", "grid"]
    frames = [frame for _, frame in reference]
    assert got["id"].tobytes() == np.concatenate([f["id"].to_numpy() for f in frames]).tobytes()
    x2 = np.concatenate([f["x2"].to_numpy() for f in frames]).astype(np.float32)
    assert got["x2"].dtype == np.float32 and got["x2"].tobytes() == x2.tobytes()
    grid = np.stack([cell for f in frames for cell in f["grid"]])
    assert got["grid"].shape == grid.shape and got["grid"].tobytes() == grid.tobytes()
    assert got["cat"] == [s for f in frames for s in f["cat"]]


def test_transform_spec_selected_fields_and_errors(dataset):
    spec = stoker.TransformSpec(selected_fields=["x", "id"])
    with Loader(dataset, transform=spec, shuffle=False) as loader:
        assert list(loader.columns) == ["x", "id"]
    with pytest.raises(InvalidOptionError, match="not both"):
        stoker.TransformSpec(removed_fields=["x"], selected_fields=["id"])
    bad = stoker.TransformSpec(lambda frame: frame.assign(extra=1))
    with pytest.raises(TransformError, match="extra"):
        Loader(dataset, transform=bad)
    wrong_shape = stoker.TransformSpec(
        lambda frame: frame.assign(g=[np.zeros(3)] * len(frame)),
        edit_fields=[("g", np.float32, (2,), False)])
    with pytest.raises(TransformError, match="'g'.*shape"):
        Loader(dataset, transform=wrong_shape)


def test_list_outputs_take_the_lists_option(dataset):
    def fn(arrays):
        runs = np.empty(len(arrays["id"]), dtype=object)
        for row, i in enumerate(arrays["id"]):
            runs[row] = np.arange(i % 3, dtype=np.int16)
        return {"id": arrays["id"], "runs": runs}

    with pytest.raises(stoker.errors.UnsupportedTypeError, match="'runs'.*lists="):
        Loader(dataset, transform=fn)
    with Loader(dataset, transform=fn, lists={"runs": "padded"}, shuffle=False,
                batch_size=100, drop_last=False) as loader:
        got = collect(loader, ["id", "runs", "runs_lengths"])
    assert got["runs_lengths"].tolist() == (got["id"] % 3).tolist()
    assert got["runs"].dtype == np.int16 and got["runs"].shape[1] == 2


def kill_on_row_group_3(arrays):
    """Kills its worker process on the row group whose first id is 192 (file 0, row group 3)."""
    if len(arrays["id"]) > 1 and int(arrays["id"][0]) == 3 * ROW_GROUP:
        os.kill(os.getpid(), 9)
    return features_fn(arrays)


def raise_on_row_group_2(arrays):
    if len(arrays["id"]) > 1 and int(arrays["id"][0]) == 2 * ROW_GROUP:
        raise ValueError("no good")
    return features_fn(arrays)


@pytest.mark.timeout(180)
def test_process_mode_gives_thread_mode_bytes_and_cache(dataset, tmp_path):
    keys = ["id", "y", "img", "label", "n_tags"]
    options = dict(transform=features_fn, seed=5, shuffle_window=100, num_threads=2,
                   drop_last=False)
    with Loader(dataset, **options) as loader:
        threads = collect(loader, keys)
    cache = str(tmp_path / "cache")
    with Loader(dataset, python_workers=2, cache_dir=cache, **options) as loader:
        processes = collect(loader, keys)
        warm = collect(loader, keys)  # epoch 1 from the cache: another order, the same rows
        loader.flush_cache()  # close() drops entries still queued behind the pipeline
    for key in ("id", "y", "img", "n_tags"):
        assert processes[key].tobytes() == threads[key].tobytes(), key
    assert processes["label"] == threads["label"]
    assert sorted(warm["id"].tolist()) == sorted(threads["id"].tolist())
    # A thread-mode loader reads the process-mode entries: one cache, the same fingerprint.
    with Loader(dataset, cache_dir=cache, **options) as loader:
        assert collect(loader, ["y"])["y"].tobytes() == threads["y"].tobytes()
        assert loader.stats()["cache"]["misses"] == 0


@pytest.mark.timeout(180)
def test_process_mode_worker_crash_names_file_and_row_group(dataset):
    from stoker.errors import WorkerCrashedError

    loader = Loader(dataset, transform=kill_on_row_group_3, python_workers=2, shuffle=False)
    started = time.monotonic()
    with pytest.raises(WorkerCrashedError, match=r"part-0\.parquet.*row group 3.*SIGKILL"):
        for _ in loader:
            pass
    assert time.monotonic() - started < 60
    loader.close()


@pytest.mark.timeout(180)
def test_process_mode_exception_names_row_group_and_traceback(dataset):
    with Loader(dataset, transform=raise_on_row_group_2, python_workers=2,
                shuffle=False) as loader:
        with pytest.raises(TransformError, match=r"part-0\.parquet.*row group 2.*ValueError: no good"):
            for _ in loader:
                pass


def test_process_mode_refuses_a_lambda(dataset):
    with pytest.raises(InvalidOptionError, match="python_workers=2 needs transform= to be picklable"):
        Loader(dataset, transform=lambda a: a, python_workers=2)
