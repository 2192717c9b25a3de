"""The `stoker` command line: inspect, bench, and clear errors (exit code 2) for bad input.

Every test runs the command as users do: the console script (``.venv/bin/stoker``, from
pyproject's [project.scripts]) in a subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
# The console script pip installs next to the interpreter.
STOKER = os.path.join(os.path.dirname(sys.executable), "stoker")


def cli(*args, timeout=120):
    """`stoker ARGS...` in a subprocess (stderr a pipe: no progress line)."""
    return subprocess.run([STOKER, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def dataset(tmp_path):
    """Two files, 3 row groups each: floats, an int label, a fixed-size embedding, a list column."""
    folder = tmp_path / "data"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for f in range(2):
        n = 3000
        table = pa.table({
            "x": rng.standard_normal(n).astype(np.float32),
            "y": rng.standard_normal(n).astype(np.float32),
            "label": rng.integers(0, 5, n),
            "emb": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.standard_normal(n * 4).astype(np.float32)), 4),
            "tags": pa.array([list(range(i % 5)) for i in range(n)], pa.list_(pa.int64())),
        })
        pq.write_table(table, folder / f"part-{f}.parquet", row_group_size=1000,
                       compression="zstd")
    return str(folder)


@pytest.fixture
def odd_dataset(tmp_path):
    """A column with nulls and a list<null> column (unsupported), gzip-compressed."""
    path = tmp_path / "odd.parquet"
    table = pa.table({"a": pa.array([1.0, None, 3.0, 4.0]),
                      "s": pa.array([[], [None], [], []], pa.list_(pa.null()))})
    pq.write_table(table, path, compression="gzip")
    return str(path)


def test_inspect_reports_files_rows_row_groups_and_columns(dataset):
    r = cli("inspect", dataset)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "part-0.parquet" in out and "part-1.parquet" in out
    assert "6,000" in out  # rows
    assert "row groups  6" in out
    assert "ZSTD" in out
    assert "dense float32 [B, 4]" in out  # what stoker makes of the embedding
    assert "needs lists=" in out  # the variable-length column
    # 6,000 rows, well under a megabyte: a rewrite would gain nothing, so no row-group advice.
    assert "row groups are small" not in out and "row group(s) for" not in out


def test_inspect_json_has_per_column_production(dataset):
    r = cli("inspect", dataset, "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["rows"] == 6000 and report["num_files"] == 2 and report["row_groups"] == 6
    cols = {c["name"]: c for c in report["columns"]}
    assert cols["label"]["produces"].startswith("dense int64")
    assert cols["emb"]["kind"] == "dense"
    assert cols["tags"].get("needs_lists") is True
    assert cols["x"]["compression"] == ["ZSTD"]


def test_inspect_warns_about_nulls_unsupported_types_and_slow_codecs(odd_dataset):
    r = cli("inspect", odd_dataset)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "column 'a' has 1 null(s)" in out and "fill_null" in out
    assert "column 's'" in out and "cannot read it" in out
    assert "GZIP" in out and "slow to" in out


@pytest.mark.parametrize("argv, needle", [
    (["inspect", "/no/such/folder"], "no such file or directory: '/no/such/folder'"),
    (["bench", "/no/such/folder", "--batches", "1"], "no such file or directory"),
])
def test_bad_uri_exits_2_naming_the_path(argv, needle):
    r = cli(*argv)
    assert r.returncode == 2
    assert needle in r.stderr


def test_empty_folder_exits_2(tmp_path):
    r = cli("inspect", str(tmp_path))
    assert r.returncode == 2, r.stderr
    assert "no Parquet files" in r.stderr


def test_not_parquet_exits_2(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    r = cli("inspect", str(bad))
    assert r.returncode == 2, r.stderr
    assert "bad.parquet" in r.stderr


def test_unknown_column_exits_2(dataset):
    r = cli("inspect", dataset, "--columns", "nope")
    assert r.returncode == 2, r.stderr
    assert "nope" in r.stderr
    r = cli("bench", dataset, "--columns", "nope", "--batches", "1", "--no-progress")
    assert r.returncode == 2, r.stderr
    assert "nope" in r.stderr


@pytest.mark.parametrize("argv, needle", [
    (["bench", "DATA", "--batch-size", "0"], "--batch-size"),
    (["bench", "DATA", "--batches", "-3"], "--batches"),
    (["bench", "DATA", "--seconds", "abc"], "--seconds"),
    (["bench", "DATA", "--lists", "jagged"], "--lists"),
    (["bench", "DATA", "--batches", "1", "--seconds", "1"], "not allowed with"),
    (["inspect"], "uri"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_options_exit_2_naming_the_option(dataset, argv, needle):
    argv = [dataset if a == "DATA" else a for a in argv]
    r = cli(*argv)
    assert r.returncode == 2
    assert needle in r.stderr


def test_bad_loader_option_value_exits_2(dataset):
    r = cli("bench", dataset, "--columns", "label", "--prefetch-bytes", "12XB",
                 "--batches", "1", "--no-progress")
    assert r.returncode == 2
    assert "prefetch_bytes" in r.stderr


def test_bench_without_lists_for_a_list_column_explains(dataset):
    r = cli("bench", dataset, "--columns", "tags", "--batches", "1", "--no-progress")
    assert r.returncode == 2, r.stderr
    assert "lists" in r.stderr


def test_bench_prints_rates_stages_and_verdict(dataset):
    r = cli("bench", dataset, "--columns", "label,emb,tags", "--features", "x,y",
            "--lists", "padded", "--batch-size", "500", "--batches", "30", "--no-progress")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    # 30 batches of 500 rows: more than one epoch of 6000 rows
    assert "15,000 rows in 30 batches" in out
    assert "rows/s" in out and "MB/s" in out
    assert "decode" in out  # a stage from loader.stats()
    assert "cache" not in out.split("stages")[0]  # no cache_dir: no cache line
    verdict = [line for line in out.splitlines() if line.startswith("verdict: ")]
    assert len(verdict) == 1
    assert verdict[0].split(": ")[1].split(":")[0] in (
        "startup", "consumer", "starved", "contended", "decode-bound", "batch-bound",
        "sequence-bound")
    _assert_verdict_matches_the_report(out)


def _assert_verdict_matches_the_report(out):
    """Every percentage the verdict states is one the report printed above it."""
    verdict = out.split("verdict: ")[1]
    report = out.split("verdict: ")[0]
    for pct in re.findall(r"(\d+)% (?:of|the)", verdict):
        assert re.search(rf"\b{pct}%", report), (pct, out)
    pools = re.findall(r"^    (\w+) +busy +(\d+)% of (\d+) thread", report, re.M)
    assert pools, out
    category = verdict.split(":")[0]
    if category.endswith("-bound") and category != "I/O-bound":
        assert max(int(p[1]) for p in pools) >= 75, out
    elif category in ("starved", "I/O-bound", "contended"):
        assert max(int(p[1]) for p in pools) < 75, out
    if category == "contended":
        load, cpus = re.search(r"load average ([\d.]+) on (\d+) CPUs", report).groups()
        assert float(load) > int(cpus) and f"{load} on {cpus} CPUs" in verdict, out


def test_bench_seconds_stops(dataset):
    r = cli("bench", dataset, "--columns", "label", "--seconds", "0.5", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "rows/s" in r.stdout
    _assert_verdict_matches_the_report(r.stdout)


def _stage(name, pool, threads, busy):
    return {"name": name, "pool": pool, "threads": threads, "busy_s": busy, "wait_in_s": 0.0,
            "wait_out_s": 0.0, "items": 1, "bytes": 1}


def _stats(stages, wait, wall=1.0, first=0.05):
    return {"stages": stages, "consumer_wait_s": wait, "wall_s": wall, "open_s": 0.01,
            "first_batch_s": first}


W2 = ("workers", 2)
# One row per verdict (plus boundaries): hand-made stats, the verdict's category, and text it
# must contain (its percentages are those of the figures the report prints).
VERDICTS = [
    ("decode-bound", _stats([_stage("decode", *W2, 1.5), _stage("sequence", "sequencer", 1, 0.1),
                             _stage("batch", *W2, 0.4)], 0.8),
     ["workers (2 threads) were busy 95% of the run", "79% of it in 'decode'", "waited 80%"]),
    ("batch-bound", _stats([_stage("decode", *W2, 0.3), _stage("batch", *W2, 1.6)], 0.8),
     ["busy 95%", "84% of it in 'batch'"]),
    # Plenty of workers: the single sequencer thread (90% busy) is what limits.
    ("sequence-bound", _stats([_stage("decode", "workers", 8, 1.9),
                               _stage("sequence", "sequencer", 1, 0.9),
                               _stage("batch", "workers", 8, 0.7)], 0.8),
     ["sequencer (1 thread) was busy 90%"]),
    # A stage the CLI has never heard of is named all the same.
    ("transform-bound", _stats([_stage("decode", *W2, 0.2), _stage("transform", *W2, 1.7)], 0.5),
     ["'transform'"]),
    ("fetch-bound", _stats([_stage("fetch", "fetcher", 1, 0.9), _stage("decode", *W2, 0.4)], 0.6),
     ["fetcher (1 thread) was busy 90%", "num_io_threads"]),
    ("consumer", _stats([_stage("decode", *W2, 0.5)], 0.01), ["only 1% of the time"]),
    # The contradiction: the loop waited, the busiest pool was busy only 20%. Not
    # "batch-bound": no pool was saturated.
    ("starved", _stats([_stage("decode", *W2, 0.1), _stage("batch", *W2, 0.3)], 0.6),
     ["waited 60%", "busy 20% of the run", "no pool was saturated"]),
    ("I/O-bound", _stats([_stage("fetch", "fetcher", 1, 0.2), _stage("decode", *W2, 0.3)], 0.7),
     ["waited 70%", "busiest: the fetcher (1 thread) was busy 20%"]),
    # The same with a load average above the CPUs: other processes hold the cores.
    ("contended", dict(_stats([_stage("decode", *W2, 0.1), _stage("batch", *W2, 0.3)], 0.6),
                       load_avg=7.26, cpus=2),
     ["waited 60%", "busy 20% of the run", "load average was 7.3 on 2 CPUs"]),
    ("starved", dict(_stats([_stage("decode", *W2, 0.1), _stage("batch", *W2, 0.3)], 0.6),
                     load_avg=2.0, cpus=2), ["no pool was saturated"]),
    ("startup", _stats([_stage("decode", *W2, 0.5)], 0.7, first=0.6), ["after 0.600 s, 60%"]),
    ("unknown", _stats([], 0.5), ["no stages"]),
    ("unknown", _stats([_stage("decode", *W2, 0.5)], 0.0, wall=0.0), ["no time"]),
    # Boundaries: a wait that prints as 10% is not "consumer" (9% is); a pool busy 75% is
    # saturated (74% is not); a first batch at 50% of the run is "startup".
    ("consumer", _stats([_stage("decode", *W2, 1.9)], 0.094), ["only 9%"]),
    ("decode-bound", _stats([_stage("decode", *W2, 1.9)], 0.096), ["waited 10%"]),
    ("decode-bound", _stats([_stage("decode", *W2, 1.5)], 0.5), ["busy 75%"]),
    ("starved", _stats([_stage("decode", *W2, 1.48)], 0.5), ["busy 74%"]),
    ("startup", _stats([_stage("decode", *W2, 1.9)], 0.6, first=0.5), ["50% of the run"]),
    ("decode-bound", _stats([_stage("decode", *W2, 1.9)], 0.6, first=0.49), ["busy 95%"]),
]


@pytest.mark.parametrize("category, stats, needles", VERDICTS,
                         ids=[f"{i}-{row[0]}" for i, row in enumerate(VERDICTS)])
def test_verdict_table(category, stats, needles):
    from stoker._cli_bench import bottleneck, bottleneck_of, verdict

    text = verdict(stats)
    assert text.split(":")[0] == category, text
    assert bottleneck_of(stats) == (text, category)
    for needle in needles:
        assert needle in text, (needle, text)
    # bench/report.py's entry point gives the same verdict.
    if stats["wall_s"] and category != "startup":
        plain = {k: v for k, v in stats.items() if k not in ("wall_s", "open_s", "first_batch_s")}
        assert bottleneck(plain, stats["wall_s"])[1] == category


def test_python_dash_m_and_console_script_entry(dataset):
    proc = subprocess.run([sys.executable, "-m", "stoker", "inspect", dataset, "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rows"] == 6000
    proc = subprocess.run([sys.executable, "-m", "stoker", "inspect", "/no/such/x"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no such file or directory" in proc.stderr


def test_pyproject_declares_the_console_script():
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        text = f.read()
    assert '[project.scripts]' in text
    assert 'stoker = "stoker.__main__:main"' in text


# ------------------------------------------------------------------------------ issue 14 usability

@pytest.fixture
def hive_dataset(tmp_path):
    """date=YYYY-MM-DD/region=N folders (pandas' partition_cols layout)."""
    root = tmp_path / "hive"
    for day in ("2024-01-01", "2024-01-02"):
        for region in (1, 2):
            folder = root / f"date={day}" / f"region={region}"
            folder.mkdir(parents=True)
            pq.write_table(pa.table({"v": np.arange(10, dtype=np.float32)}),
                           folder / "part.parquet")
    return str(root)


def test_inspect_lists_hive_partition_columns(hive_dataset):
    r = cli("inspect", hive_dataset, "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    cols = {c["name"]: c for c in report["columns"]}
    assert set(cols) == {"v", "date", "region"}
    assert cols["date"]["partition"] is True and cols["date"]["kind"] == "strings"
    assert cols["region"]["partition"] is True and cols["region"]["dtype"] == "int64"
    r = cli("inspect", hive_dataset)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "date" in out and "partition" in out


def test_inspect_accepts_partition_columns_in_columns(hive_dataset):
    r = cli("inspect", hive_dataset, "--columns", "date", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert [c["name"] for c in report["columns"]] == ["date"]
    assert report["columns"][0]["produces"].startswith("strings")
    r = cli("inspect", hive_dataset, "--columns", "v,region")
    assert r.returncode == 0, r.stderr


def test_row_group_advice_depends_on_the_dataset_size(tmp_path):
    # 80 MB uncompressed (PLAIN-encoded, zstd squeezes the counting sequence) in row groups of
    # 800 KB: big enough for a rewrite to help; the advice gives a row count for ~128 MiB.
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"z": np.arange(10_000_000, dtype=np.float64)}), path,
                   row_group_size=100_000, compression="zstd", use_dictionary=False)
    r = cli("inspect", str(path))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "row groups are small" in out and "row_group_size=" in out
    rows = int(out.split("row_group_size=")[1].split(")")[0])
    assert 10_000_000 < rows * 8 * 1.3 and rows * 8 < 2**28  # about 128 MiB of float64


def test_bench_advice_uses_the_cli_flags(dataset):
    r = cli("bench", dataset, "--columns", "tags", "--batches", "1", "--no-progress")
    assert r.returncode == 2, r.stderr
    err = r.stderr
    assert "--lists tags=padded" in err and "--lists tags=ragged" in err
    assert "lists={" not in err


def test_bench_takes_per_column_lists_time_unit_and_decimals(tmp_path):
    import decimal

    path = tmp_path / "typed.parquet"
    pq.write_table(pa.table({
        "tags": pa.array([[1, 2], [3]] * 50, pa.list_(pa.int64())),
        "ts": pa.array(list(range(100)), pa.timestamp("ms")),
        "price": pa.array([decimal.Decimal("1.25")] * 100, pa.decimal128(9, 2)),
    }), path)
    r = cli("bench", str(path), "--columns", "tags,ts,price", "--lists", "tags=padded",
                 "--time-unit", "ts=s", "--decimals", "float64", "--batches", "2",
                 "--batch-size", "10", "--no-progress")
    assert r.returncode == 0, r.stderr
    # A missing choice is reported with its flag.
    r = cli("bench", str(path), "--columns", "price", "--batches", "1",
                 "--no-progress")
    assert r.returncode == 2, r.stderr
    assert "--decimals price=float64" in r.stderr


@pytest.mark.parametrize("argv, needle", [
    (["bench", "DATA", "--lists", "tags=jagged"], "--lists"),
    (["bench", "DATA", "--time-unit", "weeks"], "--time-unit"),
    (["bench", "DATA", "--decimals", "p=int"], "--decimals"),
])
def test_bad_per_column_flags_exit_2(dataset, argv, needle):
    argv = [dataset if a == "DATA" else a for a in argv]
    r = cli(*argv)
    assert r.returncode == 2
    assert needle in r.stderr


def test_inspect_names_the_decimals_option(tmp_path):
    import decimal

    path = tmp_path / "dec.parquet"
    pq.write_table(pa.table({"price": pa.array([decimal.Decimal("1.25")] * 4,
                                               pa.decimal128(9, 2))}), path)
    r = cli("inspect", str(path))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "column 'price' (decimal128(9, 2)) is a decimal: pass decimals=" in out
    assert "Leave it out" not in out
    r = cli("inspect", str(path), "--decimals", "price=float64", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["columns"][0]["produces"] == "dense float64 [B] (decimal128(9, 2) as float64)"
    assert report["warnings"] == []


def test_inspect_with_one_columns_option_describes_the_others_too(dataset):
    """`--lists tags=padded` applies to `tags`; every other column is still described (each is
    resolved with its own per-column options), and a name that is no column is an error."""
    r = cli("inspect", dataset, "--lists", "tags=padded", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    produced = {c["name"]: c["produces"] for c in report["columns"]}
    assert produced["tags"].startswith("padded int64")
    assert produced["label"] == "dense int64 [B]", produced
    assert produced["x"] == "dense float32 [B]", produced
    assert report["warnings"] == []
    r = cli("inspect", dataset, "--lists", "tagz=padded")
    assert r.returncode != 0
    assert "per-column option names column 'tagz', which is not a column of the dataset" in r.stderr
