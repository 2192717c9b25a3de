"""What a PyTorch user tries first: DataLoader(loader), len() of the dataset, a misspelt or
DataLoader-only keyword, dtype objects, and augment= code that returns torch tensors."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import torch.utils.data

import stoker
from stoker import ops
from stoker.errors import InvalidOptionError, TransformError, UnknownOptionError


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("habits") / "d.parquet")
    rng = np.random.default_rng(3)
    table = pa.table({"id": np.arange(1000, dtype=np.int64),
                      "a": rng.standard_normal(1000), "b": rng.standard_normal(1000)})
    pq.write_table(table, path, row_group_size=250)
    return path


def test_torch_dataloader_over_a_loader_points_at_iterable_dataset(data):
    with stoker.Loader(data, batch_size=100, seed=1) as loader:
        with pytest.raises(TypeError, match=r"stoker\.IterableDataset.*batch_size=None"):
            next(iter(torch.utils.data.DataLoader(loader)))


@pytest.mark.parametrize("workers", [0, 2])
def test_iterable_dataset_len_is_the_dataloaders_batch_count(data, workers):
    ds = stoker.IterableDataset(data, batch_size=64, seed=2, num_workers=workers)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
    assert len(dl) == len(ds)
    batches = list(dl)
    assert len(batches) == len(ds)
    # Every row at most once; drop_last drops fewer than one batch per shard.
    ids = torch.cat([b["id"] for b in batches]).numpy()
    assert len(np.unique(ids)) == len(ids) and 1000 - len(ids) < 64 * max(1, workers)


def test_iterable_dataset_len_with_other_workers_is_refused(data):
    ds = stoker.IterableDataset(data, batch_size=64, seed=2)
    assert len(ds) == len(stoker.Loader(data, batch_size=64, seed=2))
    with pytest.raises(InvalidOptionError, match=r"num_workers=0\) reported len\(\) = \d+, but "
                                                 r"the DataLoader runs 2 workers"):
        list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2))


@pytest.mark.parametrize("make", [
    lambda path, **kw: stoker.Loader(path, **kw),
    lambda path, **kw: stoker.IterableDataset(path, **kw),
    lambda path, **kw: stoker.describe(path, **kw),
])
def test_a_misspelt_keyword_names_the_nearest_parameter(data, make):
    with pytest.raises(UnknownOptionError, match=r"unexpected keyword argument 'shufle'; did you "
                                                 r"mean shuffle=") as caught:
        make(data, shufle=False)
    assert isinstance(caught.value, TypeError)  # what Python raises for an unknown keyword
    assert "batch_size" in str(caught.value)  # the parameters are listed


@pytest.mark.parametrize("name, equivalent", [
    ("num_workers", "num_threads="), ("collate_fn", "augment="), ("sampler", "rank=, world_size="),
    ("prefetch_factor", "prefetch_bytes="), ("persistent_workers", "nothing"),
])
def test_a_dataloader_keyword_names_stokers_equivalent(data, name, equivalent):
    with pytest.raises(UnknownOptionError, match=rf"got {name}=, a torch DataLoader argument; "
                                                 rf"stoker's equivalent: {equivalent}"):
        stoker.Loader(data, **{name: 2})


def _features(data, dtype, output="numpy"):
    with stoker.Loader(data, columns=[], features=["a", "b"], features_dtype=dtype,
                       allow_lossy_cast=True, batch_size=100, shuffle=False, output=output) as ld:
        return next(iter(ld))["features"]


@pytest.mark.parametrize("dtype", [np.float64, np.dtype("float64"), torch.float64, "float64"])
def test_dtype_objects_are_taken_where_a_dtype_is(data, dtype):
    got = _features(data, dtype)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, _features(data, "float64"))
    assert _features(data, {"features": dtype}).dtype == np.float64


def test_torch_bfloat16_in_an_op(data):
    options = dict(columns=["a"], batch_size=100, shuffle=False, output="torch")
    with stoker.Loader(data, transforms={"a": [ops.cast(torch.bfloat16, lossy=True)]},
                       **options) as loader:
        got = next(iter(loader))["a"]
    with stoker.Loader(data, transforms={"a": [ops.cast("bfloat16", lossy=True)]},
                       **options) as loader:
        want = next(iter(loader))["a"]
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)


def test_dtype_objects_in_ops(data):
    made = [ops.cast(np.float16), ops.cast(torch.float16), {"op": "cast", "dtype": np.float16}]
    assert made[0] == made[1] == {"op": "cast", "dtype": "float16", "lossy": False}
    outs = []
    for op in made:
        with stoker.Loader(data, columns=["a"], transforms={"a": [op]}, batch_size=100,
                           shuffle=False, allow_lossy_cast=True) as loader:
            outs.append(next(iter(loader))["a"])
    assert all(o.dtype == np.float16 and np.array_equal(o, outs[0]) for o in outs)


@pytest.mark.parametrize("bad, where", [
    ("float", "features_dtype 'float' is not a known dtype; known dtypes: bool, int8"),
    (float, "features_dtype .* must be a dtype name, a numpy dtype or a torch dtype, got "
            "<class 'float'>; known dtypes: bool, int8"),
])
def test_an_unknown_dtype_lists_the_known_ones(data, bad, where):
    with pytest.raises(InvalidOptionError, match=where) as caught:
        _features(data, bad)
    assert "float32" in str(caught.value) and "bfloat16" in str(caught.value)


def test_an_unknown_op_dtype_lists_the_known_ones(data):
    with pytest.raises(InvalidOptionError, match=r"known dtypes: bool, int8.*bfloat16"):
        stoker.Loader(data, columns=["a"], transforms={"a": [ops.cast("float")]})


def _as_torch(batch, rng):
    out = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in batch.items()}
    out["a"] = out["a"] * 2
    return out


def _as_numpy(batch, rng):
    return {**batch, "a": batch["a"] * 2}


@pytest.mark.parametrize("python_workers", [0, 1])
@pytest.mark.parametrize("output", ["numpy", "torch"])
def test_augment_may_return_cpu_torch_tensors(data, python_workers, output):
    runs = []
    for fn in (_as_torch, _as_numpy):
        with stoker.Loader(data, columns=["id", "a"], batch_size=100, seed=5, augment=fn,
                           python_workers=python_workers, output=output) as loader:
            runs.append(list(loader))
    assert len(runs[0]) == len(runs[1]) == 10
    for got, want in zip(*runs):
        for key in ("id", "a"):
            assert type(got[key]) is type(want[key])
            assert got[key].dtype == want[key].dtype
            assert np.array_equal(np.asarray(got[key]), np.asarray(want[key]))


def _bf16_torch(batch, rng):
    return {"a": torch.from_numpy(batch["a"]).to(torch.bfloat16)}


def test_augment_returning_torch_bfloat16_for_a_bfloat16_column(data):
    options = dict(columns=["a"], transforms={"a": [ops.cast("bfloat16", lossy=True)]},
                   batch_size=100, seed=5, output="torch")
    with stoker.Loader(data, **options) as loader:
        want = list(loader)
    with stoker.Loader(data, augment=_bf16_torch, **options) as loader:
        got = list(loader)
    assert all(g["a"].dtype == torch.bfloat16 and torch.equal(g["a"], w["a"])
               for g, w in zip(got, want))


def _meta(batch, rng):
    return {"a": torch.empty(len(batch["a"]), device="meta")}


def test_augment_returning_a_tensor_off_the_cpu_is_refused(data):
    with stoker.Loader(data, columns=["a"], batch_size=100, seed=5, augment=_meta) as loader:
        with pytest.raises(TransformError, match=r"returned a tensor on meta for key 'a'; return "
                                                 r"CPU tensors or numpy arrays"):
            next(iter(loader))
