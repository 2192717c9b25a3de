"""bench.study's many-separate-outputs workload (``--workload many``) on a tiny set, in process:
the values' check rejects what a broken loader could deliver, and every system's batches (stoker
with and without cache_dir, Petastorm with its defaults and with its local-disk cache, the
DataLoader without workers) pass it; the driver writes study-many-* with the values column."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench import matrix_shapes as ms  # noqa: E402
from bench import study, suite  # noqa: E402

ROWS = 1_200
COLUMNS = ms.read_columns(study.MANY)


@pytest.fixture(scope="module")
def reference():
    ref = ms.reference(study.MANY, ms.raw(study.MANY, False, ROWS))
    return ref, {c: str(ref[c].dtype) for c in COLUMNS}, np.sort(study.row_hashes(ref, COLUMNS))


def _batches(arrays, size=500):
    n = len(arrays[COLUMNS[0]])
    for lo in range(0, n, size):
        part = {c: arrays[c][lo:lo + size] for c in COLUMNS}
        yield len(part[COLUMNS[0]]), part


def test_the_check_passes_the_reference_in_any_row_order(reference):
    ref, dtypes, hashes = reference
    order = np.random.default_rng(3).permutation(ROWS)
    shuffled = {c: ref[c][order] for c in COLUMNS}
    result = study.check_batches(_batches(shuffled), COLUMNS, dtypes, hashes)
    assert result["equal"], result
    assert result["rows"] == ROWS


def test_the_check_rejects_broken_deliveries(reference):
    ref, dtypes, hashes = reference

    def check(arrays):
        return study.check_batches(_batches(arrays), COLUMNS, dtypes, hashes)

    # Two rows' values of one column swapped: every column's multiset is unchanged.
    swapped = {c: ref[c].copy() for c in COLUMNS}
    swapped["x05"][[3, 700]] = swapped["x05"][[700, 3]]
    assert not check(swapped)["equal"]
    lost = {c: ref[c][1:] for c in COLUMNS}
    result = check(lost)
    assert not result["equal"] and "1 reference rows missing" in result["detail"]
    repeated = {c: np.concatenate([ref[c][:1], ref[c][1:]]) for c in COLUMNS}
    repeated["i00"] = np.concatenate([ref["i00"][:1], ref["i00"][:-1]])  # a column shifted
    assert not check(repeated)["equal"]
    widened = dict(ref, x00=ref["x00"].astype(np.float64))
    result = check(widened)
    assert not result["equal"] and "x00: float64" in result["detail"]
    assert "no i07" in study.check_batches(
        ((n, {k: v for k, v in b.items() if k != "i07"}) for n, b in _batches(ref)),
        COLUMNS, dtypes, hashes)["detail"]
    stacked = ((n, {**b, "x01": np.stack([b["x01"], b["x02"]], axis=1)})
               for n, b in _batches(ref))
    assert not study.check_batches(stacked, COLUMNS, dtypes, hashes)["equal"]


@pytest.fixture(scope="module")
def many_job(tmp_path_factory, reference):
    root = tmp_path_factory.mktemp("many")
    path = ms.ensure(study.MANY, str(root), tiny=ROWS, log=lambda _: None)
    _, dtypes, hashes = reference
    np.save(root / "ref.npy", hashes)
    return {"workload": "many", "path": path, "files": ms.files(path), "columns": COLUMNS,
            "count": study.MANY.count, "dtypes": dtypes, "batch_size": 500, "threads": 2,
            "seed": 7, "row_bytes": 288, "check": str(root / "ref.npy")}


def _check(job, batches):
    return study.check_batches(batches, COLUMNS, job["dtypes"], np.load(job["check"]))


@pytest.mark.parametrize("system", ["petastorm_default", "petastorm_study", "torch_dataloader"])
def test_every_peer_delivers_each_column_as_its_own_tensor(many_job, system, tmp_path):
    if system.startswith("petastorm"):
        from bench.runners import _petastorm_common

        reason = _petastorm_common.available()
        if reason:
            pytest.skip(reason)
    job = {**many_job, "system": system, "cache_dir": str(tmp_path / "cache"),
           # DataLoader workers would be forked processes: this checks the dataset, in process.
           "threads": 0 if system == "torch_dataloader" else 2}
    os.makedirs(job["cache_dir"])
    for epoch in range(2):  # Petastorm's second epoch reads its local-disk cache
        for _ in range(suite.ATTEMPTS):
            batches = list(study._epoch_batches(job, epoch))
            # Petastorm 0.13.1's thread pool sometimes ends an epoch after zero rows (a race of
            # its own, bench/README.md): the bench repeats such a run, and so does this test.
            if not system.startswith("petastorm") or sum(n for n, _ in batches):
                break
        assert all(set(b) == set(COLUMNS) for _, b in batches)
        assert sum(n for n, _ in batches) == ROWS
        result = _check(job, batches)
        assert result["equal"], (system, epoch, result)


def test_stoker_with_and_without_cache_dir_passes_the_check(many_job, tmp_path):
    stoker = pytest.importorskip("stoker")
    opts = study._many_stoker_options(many_job)
    assert opts["output"] == "torch" and opts["columns"] == COLUMNS and "features" not in opts
    for cache in (None, str(tmp_path / "cache")):
        loader = stoker.Loader(many_job["path"], **opts, **({"cache_dir": cache} if cache else {}))
        try:
            for epoch in range(2):  # with cache_dir the second epoch is served from it
                result = _check(many_job, ((len(b["i00"]), b) for b in loader))
                assert result["equal"], (cache, epoch, result)
        finally:
            loader.close()


def test_the_driver_writes_the_many_report(tmp_path):
    pytest.importorskip("stoker")
    report = study.run("smoke", 1, 0.0, str(tmp_path / "data"), str(tmp_path / "out"),
                       systems=["stoker_cache"], workload="many", rows=ROWS)
    system = report["systems"]["stoker_cache"]
    assert system["status"] == "ok", system
    assert system["rows"] == [ROWS] and system["check"]["equal"], system
    assert report["rows"] == ROWS and report["workload"] == "many"
    saved = json.load(open(tmp_path / "out" / "study-many-smoke-step0.json"))
    assert saved["systems"]["stoker_cache"]["check"]["equal"]
    md = (tmp_path / "out" / "study-many-smoke-step0.md").read_text()
    assert "| stoker (cache_dir) |" in md and "| equal |" in md
    assert study.report_name("quick", 2.0) == "study-quick"  # the wide set's names as before
    assert study.report_name("quick", 10.0, workload="many") == "study-many-quick-step10"
