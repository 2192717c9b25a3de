"""The Python surface: iteration, zero-copy arrays, torch output, len, repr, stats."""

import numpy as np
import pyarrow.parquet as pq
import pytest

import stoker
from stoker_testdata import write_uneven_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("api")
    rows = write_uneven_dataset(str(root))
    return root, rows


def test_single_file_and_folder_and_glob_and_list(dataset):
    root, rows = dataset
    one = stoker.Loader(str(root / "part-0.parquet"), batch_size=100, shuffle=False,
                        drop_last=False)
    assert one.dataset_rows == 1000
    assert stoker.Loader(str(root), batch_size=100).dataset_rows == rows
    assert stoker.Loader(str(root / "part-[01].parquet"), batch_size=100).dataset_rows == 3500
    both = stoker.Loader([str(root / "part-0.parquet"), str(root / "part-2.parquet")],
                         batch_size=100)
    assert both.dataset_rows == 1700


def test_values_match_pyarrow(dataset):
    root, rows = dataset
    table = pq.read_table(str(root))
    loader = stoker.Loader(str(root), columns=["id", "x", "emb", "flag"], batch_size=333,
                           shuffle=False, drop_last=False)
    batches = list(loader)
    assert len(batches) == len(loader) == -(-rows // 333)
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in batches]),
                                  table["x"].to_numpy())
    np.testing.assert_array_equal(np.concatenate([b["flag"] for b in batches]),
                                  table["flag"].to_numpy())
    emb = np.stack(table["emb"].to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(np.concatenate([b["emb"] for b in batches]), emb)


def test_arrays_are_zero_copy_views_of_aligned_slabs(dataset):
    root, _ = dataset
    batch = next(iter(stoker.Loader(str(root), batch_size=256, seed=0)))
    for name, array in batch.items():
        assert isinstance(array, np.ndarray)
        assert not array.flags.owndata, name  # a view owned by the engine's capsule
        assert array.base is not None
        assert array.ctypes.data % 64 == 0, name


def test_features_stacked(dataset):
    root, _ = dataset
    table = pq.read_table(str(root))
    loader = stoker.Loader(str(root), columns=["id"], features=["x", "flag"], batch_size=500,
                           shuffle=False, drop_last=False)
    batch = next(iter(loader))
    features = batch["features"]
    assert features.shape == (500, 2) and features.dtype == np.float32
    np.testing.assert_array_equal(features[:, 0], table["x"].to_numpy()[:500])
    np.testing.assert_array_equal(features[:, 1], table["flag"].to_numpy()[:500].astype(np.float32))


def test_torch_output_zero_copy(dataset):
    torch = pytest.importorskip("torch")
    root, _ = dataset
    loader = stoker.Loader(str(root), batch_size=128, seed=1, output="torch")
    reference = stoker.Loader(str(root), batch_size=128, seed=1)
    for tb, nb in zip(loader, reference):
        assert set(tb) == set(nb)
        for name in tb:
            assert isinstance(tb[name], torch.Tensor)
            np.testing.assert_array_equal(tb[name].numpy(), nb[name])
        assert tb["x"].dtype == torch.float32 and tb["flag"].dtype == torch.bool
        assert tb["emb"].shape == (128, 4)
        assert tb["x"].data_ptr() % 64 == 0


def test_len_repr_columns_stats(dataset):
    root, rows = dataset
    loader = stoker.Loader(str(root), batch_size=100, seed=0)
    assert len(loader) == rows // 100
    assert "rows=%d" % rows in repr(loader)
    assert loader.columns["emb"].dtype == "float32"
    assert list(loader.columns["emb"].inner_shape) == [4]
    n = sum(1 for _ in loader)
    stats = loader.stats()
    assert stats["batches"] == n and stats["rows"] == n * 100
    stages = {stage["name"]: stage for stage in stats["stages"]}
    assert [stage["name"] for stage in stats["stages"]] == ["decode", "sequence", "batch"]
    assert stages["decode"]["items"] > 0
    assert stages["decode"]["bytes"] > 0
    assert stages["batch"]["busy_s"] > 0
    assert stages["batch"]["items"] == n
    assert stages["sequence"]["threads"] == 1 and stages["sequence"]["pool"] == "sequencer"
    assert stages["decode"]["pool"] == stages["batch"]["pool"] == "workers"
    assert set(stages["decode"]) == {"name", "pool", "threads", "busy_s", "wait_in_s",
                                     "wait_out_s", "items", "bytes"}


def test_context_manager_closes(dataset):
    root, _ = dataset
    with stoker.Loader(str(root), batch_size=100) as loader:
        next(iter(loader))
    assert "closed" in repr(loader)


def test_parse_size():
    from stoker.loader import parse_size

    assert parse_size("64MiB", "x") == 64 << 20
    assert parse_size("1.5GB", "x") == 1_500_000_000
    assert parse_size(123, "x") == 123
    with pytest.raises(stoker.errors.InvalidOptionError, match="x"):
        parse_size("12 parsecs", "x")


def test_loader_does_not_import_torch(dataset):
    import subprocess
    import sys

    root, _ = dataset
    script = (f"import sys, stoker\nstoker.Loader({str(root)!r}, batch_size=100)\n"
              "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"  # start-up stays fast without torch


def test_stats_has_storage_counters(dataset):
    root, _ = dataset
    loader = stoker.Loader(str(root), batch_size=100)
    for _ in loader:
        pass
    storage = loader.stats()["storage"]
    assert storage == {"requests": 0, "retries": 0, "failures": 0, "backoff_s": 0.0}  # local


def test_one_iteration_at_a_time(dataset):
    root, _ = dataset
    loader = stoker.Loader(str(root), batch_size=100, seed=0)
    first = iter(loader)
    a = next(first)["id"].copy()
    second = iter(loader)
    b = next(second)["id"].copy()
    import numpy as np

    np.testing.assert_array_equal(a, b)  # the newer iteration starts the epoch afresh
    with pytest.raises(stoker.errors.LoaderStateError, match="newer iter"):
        next(first)
    del first  # finalising the old iterator must not stop the newer one
    assert len(list(second)) == len(loader) - 1


def test_option_naming_unknown_column_and_padding_clash(dataset, tmp_path):
    root, _ = dataset
    with pytest.raises(stoker.errors.InvalidOptionError, match="typo"):
        stoker.Loader(str(root), fill_null={"typo": 0})
    import pyarrow as pa

    pq.write_table(pa.table({"__padding__": [1, 2, 3]}), tmp_path / "p.parquet")
    with pytest.raises(stoker.errors.InvalidOptionError, match="__padding__"):
        stoker.Loader(str(tmp_path), batch_size=1, padding_mask=True)


def test_half_set_rank_environment(dataset, monkeypatch):
    root, _ = dataset
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(stoker.errors.InvalidOptionError, match="WORLD_SIZE"):
        stoker.Loader(str(root), batch_size=100)


def test_source_order_does_not_change_the_fingerprint(dataset):
    root, _ = dataset
    a = stoker.Loader([str(root / "part-0.parquet"), str(root / "part-1.parquet")], batch_size=10)
    b = stoker.Loader([str(root / "part-1.parquet"), str(root / "part-0.parquet")], batch_size=10)
    assert a.state_dict()["fingerprint"] == b.state_dict()["fingerprint"]
