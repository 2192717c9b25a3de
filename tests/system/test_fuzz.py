"""The short run of the mutation fuzzer (tools/fuzz_parquet.py) that is part of `make test`; the
long one is `make fuzz`. Every mutant of the seeded corpus must read equal to pyarrow's read of the
same bytes, or raise a typed stoker error; never crash, hang or differ silently.

Also replays every input saved under tests/data/fuzz_crashes/ (each was a finding once; the note
beside it says what happened) so a fixed bug stays fixed.
"""

from __future__ import annotations

import glob
import json
import os

import pytest

import fuzz_parquet

CRASHES = fuzz_parquet.CRASH_DIR  # tests/data/fuzz_crashes
ITERATIONS = 4000  # with the corpus itself: about 20-40 s on 2 cores
SEED = 20261130


@pytest.mark.slow
def test_short_fuzz_run(tmp_path):
    report = fuzz_parquet.fuzz(ITERATIONS, SEED, timeout=60.0, crash_dir=str(tmp_path),
                               workers=2, log=lambda _: None)
    counts = report["counts"]
    assert counts["skipped_by_time"] == 0
    assert counts["ran"] == ITERATIONS + len(fuzz_parquet._pyarrow_variants()) + 1 + \
        sum(1 for m in ("duckdb", "fastparquet", "polars") if _importable(m))
    details = "\n".join(f"{f['outcome']} iteration {f['iteration']} ({f['source']}: "
                        f"{f['mutation']}): {f.get('detail', '')[:400]} "
                        f"{f.get('stderr', '')[-800:]}" for f in report["findings"])
    assert not report["findings"], details
    # The run exercises both sides of the contract, not only one of them.
    assert counts.get("equal", 0) > 0 and counts.get("typed_error", 0) > 0, counts


def _importable(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


SAVED = sorted(glob.glob(os.path.join(CRASHES, "*.parquet")))


@pytest.fixture(scope="module")
def worker():
    w = fuzz_parquet.Worker(timeout=60.0)
    yield w
    w.close()


@pytest.mark.parametrize("path", SAVED, ids=[os.path.basename(p) for p in SAVED])
def test_saved_inputs_read_cleanly_or_raise_typed_errors(path, worker):
    with open(path[:-len(".parquet")] + ".txt") as f:
        read = json.load(f).get("read")  # how it was read when found
    result = worker.run(path, read)
    assert result["outcome"] in fuzz_parquet.GOOD, json.dumps(result)[:3000]


def test_mutations_are_a_function_of_seed_and_iteration():
    import random

    data = bytes(range(256)) * 8
    first = [fuzz_parquet.mutate(data, random.Random(f"7:{i}"), [(100, 20)]) for i in range(50)]
    again = [fuzz_parquet.mutate(data, random.Random(f"7:{i}"), [(100, 20)]) for i in range(50)]
    assert first == again
    assert len({m for m, _ in first}) > 40  # and they differ from each other


# Each engine bug the fuzzer found, with the typed error it now gets (catalog CheckFooter).
FOUND = [
    ("untyped_error-3a3ea55dc7b66985.parquet",
     r"row group 0, column 'f64': corrupt footer: Definition level histogram size mismatch"),
    ("untyped_error-87d72ff1ed313c21.parquet",
     r"row group 1, column 'lf.list.element': corrupt footer: Repetition level histogram"),
    ("untyped_error-48ea9c86bc75ab11.parquet", r"column 1 has a name that is not UTF-8"),
    # Arrow 26 refuses this footer's schema itself; Arrow 25 left the chunk count to stoker.
    ("untyped_error-1485d4f312f7a771.parquet",
     r"row group 0: corrupt footer: 6 column chunks for 5 columns in the schema|"
     r"is not a valid Parquet file: Malformed Parquet schema: too many elements"),
    ("silent_difference-235ba26870266090.parquet",
     r"row group 2, column 'i32': corrupt footer: 40 values for 0 rows"),
    ("untyped_error-70e26394e309cc47.parquet",
     r"row group 0, column 'i64': corrupt footer: the chunk's physical type disagrees"),
    ("untyped_error-09775e23440559b3.parquet",
     r"row group 1, column 'li.list.element': corrupt footer: the chunk's physical type"),
]


@pytest.mark.parametrize("name,message", FOUND, ids=[n for n, _ in FOUND])
def test_found_inputs_raise_corrupt_file_errors_naming_the_place(name, message):
    import stoker
    from stoker.errors import CorruptFileError

    path = os.path.join(CRASHES, name)
    with pytest.raises(CorruptFileError, match=message):
        stoker.describe(path)  # footers only (`stoker inspect`)
    with pytest.raises(CorruptFileError, match=message) as info:
        with stoker.Loader(path, shuffle=False, drop_last=False, lists="ragged",
                           null_mask=True) as loader:
            list(loader)
    assert name in str(info.value)


def test_column_name_that_is_not_utf8_is_a_corrupt_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    import stoker
    from stoker.errors import CorruptFileError

    path = tmp_path / "names.parquet"
    pq.write_table(pa.table({"ok": [1, 2], "zzname": [3, 4]}), path, store_schema=False)
    data = path.read_bytes()
    assert data.count(b"zzname") == 2  # the schema and the column chunk's path
    path.write_bytes(data.replace(b"zzname", b"z\xffname"))
    with pytest.raises(CorruptFileError, match=r"names\.parquet.*column 1 has a name that is "
                                               r"not UTF-8"):
        stoker.Loader(str(path), shuffle=False, drop_last=False)
    # A valid non-ASCII name still reads.
    pq.write_table(pa.table({"héllo 日本": [1, 2]}), path)
    with stoker.Loader(str(path), shuffle=False, drop_last=False) as loader:
        assert list(loader.columns) == ["héllo 日本"]
        assert [b["héllo 日本"].tolist() for b in loader] == [[1, 2]]


def test_harness_reports_crashes_hangs_and_differences(tmp_path):
    """The worker protocol itself: a signal is a crash, silence past the timeout a hang, and
    the worker is restarted after either."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = str(tmp_path / "ok.parquet")
    pq.write_table(pa.table({"x": [1, 2, 3]}), path)
    worker = fuzz_parquet.Worker(timeout=20.0)
    try:
        assert worker.run(path)["outcome"] == "equal"
        crash = worker.run(path, selftest="crash")
        assert crash["outcome"] == "crash" and crash["detail"] == f"exit {-11}", crash
        assert worker.run(path)["outcome"] == "equal"  # restarted
        worker.timeout = 3.0
        assert worker.run(path, selftest="hang")["outcome"] == "hang"
        worker.timeout = 20.0
        assert worker.run(path, selftest="differ")["outcome"] == "silent_difference"
    finally:
        worker.close()


def test_corrupt_stored_arrow_schema_is_a_corrupt_file_not_an_unsupported_type(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    import stoker
    from stoker.errors import CorruptFileError

    path = tmp_path / "arrowschema.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), path)
    data = bytearray(path.read_bytes())
    at = data.index(b"ARROW:schema") + len(b"ARROW:schema") + 8  # inside the base64 value
    data[at:at + 4] = b"!!!!"
    path.write_bytes(bytes(data))
    with pytest.raises(pa.ArrowInvalid):
        pq.read_table(path)  # pyarrow refuses it too
    with pytest.raises(CorruptFileError, match=r"arrowschema\.parquet.*ARROW:schema"):
        stoker.Loader(str(path), shuffle=False, drop_last=False)
