"""Categoricals: string columns as int64 ids (issue 14, "Categoricals and strings as ids").

Ids are checked against the vocabulary applied to pyarrow's reading of the same files: 0 for a
value outside the vocabulary, i + 1 for its i-th value. Datasets: pandas-written `category`
columns (dictionary<string>), plain and large strings, and a hive-partitioned folder."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker.errors import InvalidOptionError, NullValueError, UnsupportedTypeError

CITIES = ["paris", "oslo", "lima", "kyiv", "baku", "rome"]


def _expected(values, vocabulary):
    ids = {v: i + 1 for i, v in enumerate(vocabulary)}
    return [ids.get(v, 0) for v in values]


def _all(loader_kwargs, source, key="city"):
    with stoker.Loader(source, **loader_kwargs) as loader:
        batches = list(loader)
        vocabulary = loader.vocabulary(key) if key else None
    return batches, vocabulary


@pytest.fixture
def pandas_dataset(tmp_path):
    """A pandas DataFrame with `category` dtype, written by pandas (pyarrow engine), several
    row groups."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    n = 400
    frame = pd.DataFrame({
        "city": pd.Categorical(rng.choice(CITIES, n), categories=sorted(CITIES) + ["unused"]),
        "label": np.arange(n, dtype=np.int64),
        "x": rng.normal(size=n),
    })
    path = str(tmp_path / "pandas.parquet")
    frame.to_parquet(path, engine="pyarrow", row_group_size=64, index=False)
    return path


def test_pandas_category_auto_vocabulary(pandas_dataset):
    assert pa.types.is_dictionary(pq.read_schema(pandas_dataset).field("city").type)
    batches, vocabulary = _all(dict(columns=["label", "city"], categories={"city": "auto"},
                                    batch_size=50, seed=3), pandas_dataset)
    table = pq.read_table(pandas_dataset)
    cities = [str(v) for v in table.column("city").to_pylist()]
    # Built from the dictionary pages: every value used, sorted, plus what the writer put in
    # the dictionary (pyarrow stores a pandas category's unused categories too).
    assert vocabulary == sorted(vocabulary)
    assert set(cities) <= set(vocabulary) <= set(CITIES) | {"unused"}
    labels = np.concatenate([b["label"] for b in batches])
    ids = np.concatenate([b["city"] for b in batches])
    assert ids.dtype == np.int64
    assert ids.tolist() == [_expected([cities[l]], vocabulary)[0] for l in labels]
    with stoker.Loader(pandas_dataset, columns=["city"], categories={"city": "auto"},
                       batch_size=10) as loader:
        info = loader.columns["city"]
        assert info.dtype == "int64" and info.annotation == "category"


@pytest.mark.parametrize("string_type", [pa.string(), pa.large_string(),
                                         pa.dictionary(pa.int32(), pa.string())])
@pytest.mark.parametrize("dictionary", [True, False])
def test_string_kinds_and_encodings(write_parquet, string_type, dictionary):
    values = [CITIES[(i * 7) % 6] for i in range(300)]
    arr = pa.array(values, pa.string())
    if pa.types.is_dictionary(string_type):
        arr = arr.dictionary_encode()
    else:
        arr = arr.cast(string_type)
    path = write_parquet(pa.table({"city": arr, "label": np.arange(300)}), row_group_size=50,
                         use_dictionary=dictionary)
    batches, vocabulary = _all(dict(columns=["label", "city"], categories={"city": "auto"},
                                    batch_size=64, shuffle=False), path)
    assert vocabulary == sorted(set(values))
    ids = np.concatenate([b["city"] for b in batches]).tolist()
    assert ids == _expected(values[:len(ids)], vocabulary)


def test_given_list_and_file_with_out_of_vocabulary(write_parquet, tmp_path):
    values = [CITIES[i % 6] for i in range(120)]
    path = write_parquet(pa.table({"city": values}))
    given = ["rome", "paris", "lima"]
    batches, vocabulary = _all(dict(categories={"city": given}, batch_size=120,
                                    shuffle=False), path)
    assert vocabulary == given
    assert batches[0]["city"].tolist() == _expected(values, given)
    vocab_file = tmp_path / "cities.txt"
    vocab_file.write_text("rome\nparis\n\nlima\n", encoding="utf-8")
    from_file, file_vocabulary = _all(dict(categories={"city": vocab_file}, batch_size=120,
                                           shuffle=False), path)
    assert file_vocabulary == given
    assert from_file[0]["city"].tobytes() == batches[0]["city"].tobytes()


def test_hive_partition_as_category_and_feature(tmp_path):
    days = ["2024-01-02", "2024-01-01", "2024-03-05"]
    for k, day in enumerate(days):
        folder = tmp_path / f"date={day}" / f"shard={k}"
        folder.mkdir(parents=True)
        pq.write_table(pa.table({"label": np.arange(10, dtype=np.int64) + 100 * k}),
                       folder / "part.parquet")
    source = str(tmp_path)
    with stoker.Loader(source, columns=["label", "date"], features={"ids": ["date", "shard"]},
                       features_dtype={"ids": "int64"}, categories={"date": "auto"},
                       batch_size=30, shuffle=False) as loader:
        batch = next(iter(loader))
        vocabulary = loader.vocabulary("date")
    assert vocabulary == sorted(days)
    k = batch["label"] // 100
    assert batch["date"].tolist() == [sorted(days).index(days[i]) + 1 for i in k]
    assert batch["ids"][:, 0].tolist() == batch["date"].tolist()
    assert batch["ids"][:, 1].tolist() == k.tolist()


def test_describe_shows_categories(pandas_dataset):
    described = stoker.describe(pandas_dataset, columns=["city", "x"],
                                categories={"city": ["rome", "oslo"]})
    city, x = described.columns
    assert city.ok and city.dtype == "int64" and city.annotation == "category"
    assert city.vocabulary_size == 2 and x.vocabulary_size == 0
    assert city.feature_group == "" and x.feature_group == ""


def test_categorical_in_an_int64_group_with_dense(pandas_dataset):
    with stoker.Loader(pandas_dataset, columns=["label"],
                       features={"dense": ["x"], "ids": ["city"]},
                       features_dtype={"dense": "float64", "ids": "int64"},
                       categories={"city": ["rome", "oslo"]}, batch_size=400,
                       shuffle=False) as loader:
        batch = next(iter(loader))
    cities = [str(v) for v in pq.read_table(pandas_dataset).column("city").to_pylist()]
    assert batch["ids"][:, 0].tolist() == _expected(cities, ["rome", "oslo"])
    # Ids into float32 are exact: the vocabulary bounds them.
    with stoker.Loader(pandas_dataset, features=["city"], categories={"city": "auto"},
                       batch_size=10) as loader:
        assert loader.columns["features"].dtype == "float32"


def test_nulls_are_not_mapped_silently(write_parquet):
    values = ["a", None, "b", "a", None] * 20
    path = write_parquet(pa.table({"city": values}), row_group_size=25)
    with stoker.Loader(path, categories={"city": "auto"}, batch_size=100) as loader:
        assert loader.vocabulary("city") == ["a", "b"]
        with pytest.raises(NullValueError, match="'city'"):
            list(loader)
    batches, _ = _all(dict(categories={"city": "auto"}, null_mask=True, batch_size=100,
                           shuffle=False), path)
    assert batches[0]["city"].tolist() == [1, 0, 2, 1, 0] * 20
    assert batches[0]["city_mask"].tolist() == [v is not None for v in values]
    filled, _ = _all(dict(categories={"city": "auto"}, fill_null={"city": 0}, batch_size=100,
                          shuffle=False), path)
    assert filled[0]["city"].tolist() == [1, 0, 2, 1, 0] * 20


def test_determinism_across_threads_and_cache(pandas_dataset, tmp_path):
    kwargs = dict(columns=["label", "city"], features={"d": ["x"], "ids": ["city"]},
                  features_dtype={"ids": "int64", "d": "float64"},
                  categories={"city": "auto"}, batch_size=37, seed=9)

    def run(**extra):
        with stoker.Loader(pandas_dataset, **kwargs, **extra) as loader:
            return [b"".join(np.ascontiguousarray(v).tobytes() for v in batch.values())
                    for batch in loader]

    reference = run(num_threads=1)
    assert run(num_threads=4) == reference
    cache = tmp_path / "cache"
    assert run(num_threads=3, cache_dir=cache) == reference  # fills the cache
    assert run(num_threads=2, cache_dir=cache) == reference  # served from it


def test_the_vocabulary_is_part_of_the_cache_key_and_fingerprint(write_parquet, tmp_path):
    path = write_parquet(pa.table({"city": CITIES * 10}))
    cache = tmp_path / "cache"

    def ids(vocabulary):
        with stoker.Loader(path, categories={"city": vocabulary}, cache_dir=cache,
                           batch_size=60, shuffle=False) as loader:
            return next(iter(loader))["city"].tolist(), loader.state_dict()

    first, state = ids(["paris", "oslo"])
    second, _ = ids(["oslo", "paris"])
    assert first[:6] == [1, 2, 0, 0, 0, 0] and second[:6] == [2, 1, 0, 0, 0, 0]
    with stoker.Loader(path, categories={"city": ["oslo", "paris"]}, batch_size=60,
                       shuffle=False) as loader:
        with pytest.raises(Exception, match="categories"):
            loader.load_state_dict(state)


@pytest.mark.parametrize("categories, error, match", [
    ({"x": "auto"}, UnsupportedTypeError, "categories apply to string"),
    ({"nope": "auto"}, InvalidOptionError, "not in columns or features"),
    ({"city": []}, InvalidOptionError, "is empty"),
    ({"city": ["a", "a"]}, InvalidOptionError, "twice"),
    ({"city": "/no/such/vocabulary.txt"}, InvalidOptionError, "cannot read"),
    ({"city": [1, 2]}, InvalidOptionError, "list of str"),
])
def test_category_mistakes_are_typed_errors(write_parquet, categories, error, match):
    path = write_parquet(pa.table({"city": ["a", "b"], "x": [1.0, 2.0]}))
    with pytest.raises(error, match=match):
        stoker.Loader(path, columns=["city", "x"], categories=categories, batch_size=2)


def test_vocabulary_of_a_plain_column_is_an_error(write_parquet):
    path = write_parquet(pa.table({"city": ["a", "b"], "x": [1.0, 2.0]}))
    with stoker.Loader(path, categories={"city": "auto"}, batch_size=2) as loader:
        with pytest.raises(InvalidOptionError, match="'x' is not categorical"):
            loader.vocabulary("x")


def test_strings_as_features_point_to_categories(write_parquet):
    path = write_parquet(pa.table({"city": ["a", "b"]}))
    with pytest.raises(UnsupportedTypeError, match="categories="):
        stoker.Loader(path, features=["city"], batch_size=2)


def test_a_dictionary_that_fell_back_to_plain_pages_is_read_whole(write_parquet):
    # A small dictionary page limit makes the writer fall back to plain pages part way: the
    # dictionary page alone would miss values, so the vocabulary must come from the values.
    values = [f"v{i:05d}" for i in range(3000)]
    path = write_parquet(pa.table({"s": values}), dictionary_pagesize_limit=512,
                         data_page_size=1024)
    meta = pq.ParquetFile(path).metadata.row_group(0).column(0)
    assert "PLAIN" in meta.encodings and meta.dictionary_page_offset is not None
    with stoker.Loader(path, categories={"s": "auto"}, batch_size=3000,
                       shuffle=False) as loader:
        assert loader.vocabulary("s") == values
        assert next(iter(loader))["s"].tolist() == list(range(1, 3001))


def _rename_city(batch):
    return {"c2": batch["city"]}


def test_outputs_of_transform_take_a_given_vocabulary(write_parquet):
    path = write_parquet(pa.table({"city": ["a", "b", "c", "a"]}))
    with stoker.Loader(path, transform=_rename_city, categories={"c2": ["a", "c"]},
                       batch_size=4, shuffle=False) as loader:
        assert next(iter(loader))["c2"].tolist() == [1, 0, 2, 1]
    with pytest.raises(InvalidOptionError, match="give the vocabulary"):
        stoker.Loader(path, transform=_rename_city, categories={"c2": "auto"}, batch_size=4)


def test_auto_vocabularies_of_many_columns_are_the_same_on_any_thread_count(tmp_path):
    # Issue 26: the "auto" vocabularies of several columns are built together, on up to
    # num_threads threads. Several columns of every kind an "auto" vocabulary is built from
    # (dictionary pages, plain string, large_string, a dictionary that fell back to plain pages,
    # pandas-like dictionary<string>, nulls), over two files of several row groups: the
    # vocabularies, the ids and the fingerprint must not depend on the thread count.
    rng = np.random.default_rng(26)
    n = 900

    def column(j, cardinality):
        codes = rng.integers(0, cardinality, n)
        return [f"c{j}_{c:05d}" for c in codes]

    for part in range(2):
        table = pa.table({
            "a": column(0, 4),
            "b": column(1, 50),
            "c": pa.array(column(2, 700), pa.large_string()),
            "d": pa.array(column(3, 30)).dictionary_encode(),
            "e": [None if i % 7 == 0 else v for i, v in enumerate(column(4, 12))],
            "f": column(5, 2000),
            "label": np.arange(n, dtype=np.int64) + part * n,
        })
        pq.write_table(table, str(tmp_path / f"part-{part}.parquet"), row_group_size=200,
                       dictionary_pagesize_limit=2048, data_page_size=1024)
    # "f" falls back to plain pages part way (read whole), the others come from dictionary pages.
    assert "PLAIN" in pq.ParquetFile(str(tmp_path / "part-0.parquet")).metadata.row_group(
        0).column(5).encodings
    names = ["a", "b", "c", "d", "e", "f"]

    def run(threads):
        with stoker.Loader(str(tmp_path), columns=names + ["label"], batch_size=128,
                           categories={name: "auto" for name in names}, fill_null={"e": 0},
                           seed=5, num_threads=threads) as loader:
            vocabularies = {name: loader.vocabulary(name) for name in names}
            batches = [b"".join(np.ascontiguousarray(batch[k]).tobytes() for k in sorted(batch))
                       for batch in loader]
            return vocabularies, batches, loader.state_dict()["fingerprint"]

    reference = run(1)
    vocabularies, batches, _ = reference
    table = pq.read_table(str(tmp_path))
    for name in names:
        values = [v for v in table.column(name).to_pylist() if v is not None]
        assert vocabularies[name] == sorted(set(values))
    assert len(batches) >= 2 * n // 128 and all(batches)
    assert run(2) == reference
    assert run(4) == reference


def test_auto_vocabularies_over_more_files_than_a_builder_keeps_open(tmp_path):
    # A builder keeps at most 16 files' readers open: 20 files, two row groups each, make it close
    # and reopen them column after column.
    expected = {"a": set(), "b": set()}
    for part in range(20):
        a = [f"a{(part * 7 + i) % 31:02d}" for i in range(40)]
        b = [f"b{part:02d}_{i % 3}" for i in range(40)]
        expected["a"].update(a)
        expected["b"].update(b)
        pq.write_table(pa.table({"a": a, "b": b}), str(tmp_path / f"part-{part:02d}.parquet"),
                       row_group_size=20)
    for threads in (1, 2):
        with stoker.Loader(str(tmp_path), categories={"a": "auto", "b": "auto"}, batch_size=100,
                           num_threads=threads) as loader:
            assert loader.vocabulary("a") == sorted(expected["a"])
            assert loader.vocabulary("b") == sorted(expected["b"])
            assert sum(len(batch["a"]) for batch in loader) == 800


def _narrow_ids_dataset(write_parquet):
    """Three categorical columns whose vocabularies fit uint8 (4 values), uint16 (300) and
    uint32 (70,000, given), one with nulls, and a row label; several row groups."""
    rng = np.random.default_rng(26)
    n = 3000
    small = np.array(["d", "a", "c", "b"])[rng.integers(0, 4, n)].astype(object)
    small[rng.random(n) < 0.2] = None
    medium = np.array([f"m{i:03d}" for i in range(300)])[rng.integers(0, 300, n)]
    large_values = np.array([f"w{i:05d}" for i in rng.integers(0, 70010, n)])
    large_values[7] = "w69999"  # the last id, 70,000
    path = write_parquet(pa.table({"label": np.arange(n, dtype=np.int64),
                                   "small": pa.array(small, pa.string()),
                                   "medium": medium, "large": large_values}),
                         row_group_size=700)
    return path, n


def _searchsorted_ids(values, vocabulary):
    """Ids as stoker numbers them: 0 out of the vocabulary (and for nulls), i + 1 for the i-th
    value of the sorted vocabulary."""
    vocabulary = np.asarray(vocabulary)
    values = np.asarray(["" if v is None else v for v in values])
    at = np.clip(np.searchsorted(vocabulary, values), 0, len(vocabulary) - 1)
    return np.where(vocabulary[at] == values, at + 1, 0).astype(np.int64)


def test_narrow_decoded_ids_deliver_the_same_int64_batches(write_parquet, tmp_path):
    """Issue 26: ids are decoded and cached as uint8/uint16/uint32 (the vocabulary's width) but
    delivered exactly as before: int64, fill_null in int64 (-1 is no uint8), masks, features
    stacked as int64 and float32, from the decoder and from the ready-tensor cache alike."""
    path, n = _narrow_ids_dataset(write_parquet)
    table = pq.read_table(path)
    given = ["a", "b", "c"]  # "d" is out of the vocabulary: id 0
    large = [f"w{i:05d}" for i in range(70000)]  # w70000.. are out of it
    kwargs = dict(columns=["label", "small", "medium", "large"],
                  features={"ids": ["medium"], "f": ["large"]},
                  features_dtype={"ids": "int64", "f": "float32"},
                  categories={"small": given, "medium": "auto", "large": large},
                  fill_null={"small": -1}, null_mask=["small"], batch_size=256, seed=5,
                  drop_last=False)
    expected = {"small": _searchsorted_ids(table.column("small").to_pylist(), given)}
    small_null = np.array([v is None for v in table.column("small").to_pylist()])
    expected["small"][small_null] = -1

    def run(**extra):
        with stoker.Loader(path, **kwargs, **extra) as loader:
            for name in ("small", "medium", "large"):
                assert loader.columns[name].dtype == "int64"
                assert loader.columns[name].annotation == "category"
            vocabularies = {name: loader.vocabulary(name) for name in ("medium", "large")}
            assert vocabularies["large"] == large
            batches = list(loader)
            loader.flush_cache()
            stats = loader.stats()["cache"]
        return batches, vocabularies, stats

    batches, vocabularies, _ = run()
    assert len(vocabularies["medium"]) == 300 and len(vocabularies["large"]) == 70000
    for name in ("medium", "large"):
        expected[name] = _searchsorted_ids(table.column(name).to_pylist(), vocabularies[name])
    labels = np.concatenate([b["label"] for b in batches])
    assert sorted(labels.tolist()) == list(range(n))
    for name in ("small", "medium", "large"):
        got = np.concatenate([b[name] for b in batches])
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, expected[name][labels])
    np.testing.assert_array_equal(np.concatenate([b["small_mask"] for b in batches]),
                                  ~small_null[labels])
    ids = np.concatenate([b["ids"] for b in batches])
    assert ids.dtype == np.int64
    np.testing.assert_array_equal(ids, expected["medium"][labels][:, None])
    floats = np.concatenate([b["f"] for b in batches])
    assert floats.dtype == np.float32
    np.testing.assert_array_equal(floats, expected["large"][labels][:, None].astype(np.float32))

    def as_bytes(batches):
        return [b"".join(np.ascontiguousarray(v).tobytes() for v in batch.values())
                for batch in batches]

    reference = as_bytes(batches)
    cache = tmp_path / "cache"
    cold, _, _ = run(cache_dir=cache)
    assert as_bytes(cold) == reference  # fills the cache
    warm, _, stats = run(cache_dir=cache)
    assert as_bytes(warm) == reference  # served from it
    assert stats["hits"] > 0, stats


def test_later_epochs_map_each_row_groups_own_dictionary(tmp_path):
    """A loader keeps each dictionary's ids from epoch to epoch (the decoder's memo, by content):
    row groups whose dictionaries hold the same strings in another order, or the same strings
    read under another vocabulary, must each get their own ids in every epoch, with one thread
    or several; the first and last row groups' dictionaries are equal and share the kept ids."""
    order = ["paris", "oslo", "lima", "kyiv"]
    groups = [order, order[::-1], order[1:] + order[:1], order]  # first-appearance orders
    path = str(tmp_path / "cities.parquet")
    label = 0
    with pq.ParquetWriter(path, pa.schema([("a", pa.string()), ("b", pa.string()),
                                           ("label", pa.int64())])) as writer:
        for first in groups:
            rest = list(np.random.default_rng(label).choice(order, 96))
            cities = first + rest
            writer.write_table(pa.table({"a": cities, "b": cities,
                                         "label": np.arange(label, label + 100)}))
            label += 100
    dictionaries = [pq.ParquetFile(path, read_dictionary=["a"]).read_row_group(g, columns=["a"])
                    .column("a").chunk(0).dictionary.to_pylist() for g in range(len(groups))]
    assert dictionaries == groups  # what the test relies on: the writer's first-appearance order
    cities = pq.read_table(path).column("a").to_pylist()
    vocab_a, vocab_b = sorted(order), sorted(order, reverse=True)
    want_a = np.array(_expected(cities, vocab_a))
    want_b = np.array(_expected(cities, vocab_b))
    for threads in (1, 3):
        with stoker.Loader(path, columns=["label", "a", "b"], batch_size=64, seed=5,
                           shuffle_window=150, categories={"a": vocab_a, "b": vocab_b},
                           num_threads=threads, drop_last=False) as loader:
            for epoch in range(3):
                loader.set_epoch(epoch)
                seen = 0
                for batch in loader:
                    rows = batch["label"]
                    assert batch["a"].tolist() == want_a[rows].tolist(), (threads, epoch)
                    assert batch["b"].tolist() == want_b[rows].tolist(), (threads, epoch)
                    seen += len(rows)
                assert seen == len(cities)
