"""A Spark DataFrame fed to PyTorch: stoker.petastorm.spark (Petastorm's make_spark_converter
interface, compared row for row with Petastorm's own converter) and stoker.spark (native).

One local[2] Spark for the module (the ``spark`` xdist group keeps Spark tests on one worker).
"""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

import stoker
from stoker.errors import InvalidOptionError, UnsupportedInputError

import petastorm_fixtures as pf

pytestmark = [pytest.mark.skipif(bool(pf.missing() or pf.spark_missing()),
                                 reason=pf.missing() or pf.spark_missing() or "ok"),
              pytest.mark.slow]

ROWS = 120


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    session = pf.spark_session(str(tmp_path_factory.mktemp("spark")))
    yield session
    session.stop()


@pytest.fixture(scope="module")
def frame(spark):
    from pyspark.ml.linalg import Vectors

    rows = [(i, i / 7.0, Vectors.dense([i, i + 0.5, -i]), [i * 0.25, i * 0.5]) for i in range(ROWS)]
    return spark.createDataFrame(rows, ["id", "x", "v", "pair"]).repartition(3)


def _expected(frame):
    """{id: (x, v, pair)} as the converters deliver them: doubles cast to float32."""
    out = {}
    for row in frame.collect():
        out[row["id"]] = (np.float32(row["x"]), np.asarray(row["v"].toArray(), np.float32),
                          np.asarray(row["pair"], np.float32))
    return out


def _rows(batches):
    out = {}
    for batch in batches:
        arrays = {k: np.asarray(v) for k, v in batch.items()}
        for j, row_id in enumerate(arrays["id"].tolist()):
            assert row_id not in out, f"row {row_id} delivered twice"
            out[row_id] = (arrays["x"][j], arrays["v"][j], arrays["pair"][j])
    return out


def _assert_same(got, expected):
    assert sorted(got) == sorted(expected)
    for row_id, (x, v, pair) in expected.items():
        gx, gv, gpair = got[row_id]
        assert np.asarray(gx).dtype == np.float32 and gx == x
        np.testing.assert_array_equal(gv, v)
        assert np.asarray(gv).dtype == np.float32
        np.testing.assert_array_equal(gpair, pair)


def test_spark_converter_delivers_what_petastorms_converter_delivers(spark, frame, tmp_path):
    from stoker.petastorm.spark import SparkDatasetConverter, make_spark_converter

    pf.apply_compat()
    from petastorm.spark import make_spark_converter as petastorm_converter

    spark.conf.set(SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF, "file://" + str(tmp_path))
    try:
        converter = make_spark_converter(frame)
        theirs = petastorm_converter(frame)
        assert len(converter) == len(theirs) == ROWS
        with converter.make_torch_dataloader(batch_size=16, num_epochs=1) as loader:
            batches = list(loader)
        assert all(len(b["id"]) == 16 for b in batches[:-1])
        with theirs.make_torch_dataloader(batch_size=16, num_epochs=1, workers_count=2) as loader:
            reference = _rows(loader)
        mine = _rows(batches)
        _assert_same(mine, _expected(frame))
        _assert_same(mine, {k: tuple(np.asarray(a) for a in v) for k, v in reference.items()})
        # Written once: the same DataFrame gives the same folder, until delete().
        again = make_spark_converter(frame)
        assert again.cache_dir_url == converter.cache_dir_url
        folder = stoker.spark.local_path(converter.cache_dir_url)
        assert os.path.isdir(folder)
        converter.delete()
        assert not os.path.exists(folder)
        fresh = make_spark_converter(frame)
        assert fresh.cache_dir_url != converter.cache_dir_url
        fresh.delete()
        theirs.delete()
    finally:
        spark.conf.unset(SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF)


def test_spark_converter_endless_by_default_and_seeded_order(spark, frame, tmp_path):
    from stoker.petastorm.spark import SparkDatasetConverter, make_spark_converter

    spark.conf.set(SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF, str(tmp_path))
    try:
        converter = make_spark_converter(frame, dtype="float64")
        with converter.make_torch_dataloader(batch_size=50) as loader:  # num_epochs=None
            seen = []
            for batch in loader:
                assert batch["x"].dtype.is_floating_point and str(batch["x"].dtype) == "torch.float64"
                seen.extend(batch["id"].tolist())
                if len(seen) >= 3 * ROWS:
                    break
        assert len(seen) >= 3 * ROWS and sorted(seen[:ROWS]) == list(range(ROWS))

        def ids(seed):
            with converter.make_torch_dataloader(batch_size=32, num_epochs=1, seed=seed,
                                                 shuffle_rows=True) as loader:
                return [i for b in loader for i in b["id"].tolist()]

        assert ids(5) == ids(5) and sorted(ids(5)) == list(range(ROWS))
        converter.delete()
    finally:
        spark.conf.unset(SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF)


def test_spark_converter_errors_name_what_to_fix(spark, frame, tmp_path):
    from stoker.petastorm.spark import SparkDatasetConverter, make_spark_converter

    with pytest.raises(InvalidOptionError, match="petastorm.spark.converter.parentCacheDirUrl"):
        make_spark_converter(frame)
    spark.conf.set(SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF, str(tmp_path))
    try:
        with pytest.raises(InvalidOptionError, match="compression_codec"):
            make_spark_converter(frame, compression_codec="bzip2")
        with pytest.raises(InvalidOptionError, match="dtype"):
            make_spark_converter(frame, dtype="float16")
        converter = make_spark_converter(frame)
        with pytest.raises(InvalidOptionError, match="dataset_url_or_urls"):
            converter.make_torch_dataloader(dataset_url_or_urls="elsewhere")
        with pytest.raises(UnsupportedInputError, match="make_torch_dataloader"):
            converter.make_tf_dataset()
        converter.delete()
    finally:
        spark.conf.unset(SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF)


def test_spark_native_materialize_and_loader(spark, frame, tmp_path):
    data = stoker.spark.materialize(frame, tmp_path / "parent")
    assert len(data) == ROWS and all(f.endswith(".parquet") for f in data.files)
    assert pickle.loads(pickle.dumps(data)) == data  # a training process elsewhere can use it

    def epoch(data, **kw):
        return list(data.loader(batch_size=25, lists="padded", seed=3, drop_last=False, **kw))

    batches = epoch(data)
    got = {}
    for b in batches:
        for j, row_id in enumerate(b["id"].tolist()):
            got[row_id] = (b["x"][j], b["v"][j], b["pair"][j])
    _assert_same(got, _expected(frame))
    again = epoch(pickle.loads(pickle.dumps(data)), num_threads=1)
    assert [{k: v.tobytes() for k, v in b.items()} for b in again] == \
        [{k: v.tobytes() for k, v in b.items()} for b in batches]
    with pytest.raises(InvalidOptionError, match="source"):
        data.loader(source="elsewhere")
    with pytest.raises(InvalidOptionError, match="compression"):
        stoker.spark.materialize(frame, tmp_path / "parent", compression="bzip2")
    data.delete()
    assert not os.path.exists(stoker.spark.local_path(data.url))


def test_spark_urls_become_stoker_sources():
    assert stoker.spark.local_path("file:/tmp/a b/x.parquet") == "/tmp/a b/x.parquet"
    assert stoker.spark.local_path("file:///tmp/x.parquet") == "/tmp/x.parquet"
    assert stoker.spark.local_path("file:/tmp/a%20b.parquet") == "/tmp/a b.parquet"
    assert stoker.spark.local_path("dbfs:/ml/x.parquet") == "/dbfs/ml/x.parquet"
    assert stoker.spark.local_path("s3a://bucket/k/x.parquet") == "s3://bucket/k/x.parquet"
    assert stoker.spark.local_path("gs://bucket/x.parquet") == "gs://bucket/x.parquet"
