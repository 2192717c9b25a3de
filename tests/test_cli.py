"""The `stoker` command line: inspect, bench, and clear errors (exit code 2) for bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stoker.__main__ import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def test_inspect_reports_files_rows_row_groups_and_columns(dataset, capsys):
    assert main(["inspect", dataset]) == 0
    out = capsys.readouterr().out
    assert "part-0.parquet" in out and "part-1.parquet" in out
    assert "6,000" in out  # rows
    assert "row groups  6" in out
    assert "ZSTD" in out
    assert "dense float32 [B, 4]" in out  # what stoker makes of the embedding
    assert "needs lists=" in out  # the variable-length column
    # 6,000 rows, well under a megabyte: a rewrite would gain nothing, so no row-group advice.
    assert "row groups are small" not in out and "row group(s) for" not in out


def test_inspect_json_has_per_column_production(dataset, capsys):
    assert main(["inspect", dataset, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rows"] == 6000 and report["num_files"] == 2 and report["row_groups"] == 6
    cols = {c["name"]: c for c in report["columns"]}
    assert cols["label"]["produces"].startswith("dense int64")
    assert cols["emb"]["kind"] == "dense"
    assert cols["tags"].get("needs_lists") is True
    assert cols["x"]["compression"] == ["ZSTD"]


def test_inspect_warns_about_nulls_unsupported_types_and_slow_codecs(odd_dataset, capsys):
    assert main(["inspect", odd_dataset]) == 0
    out = capsys.readouterr().out
    assert "column 'a' has 1 null(s)" in out and "fill_null" in out
    assert "column 's'" in out and "cannot read it" in out
    assert "GZIP" in out and "slow to" in out


@pytest.mark.parametrize("argv, needle", [
    (["inspect", "/no/such/folder"], "no such file or directory: '/no/such/folder'"),
    (["bench", "/no/such/folder", "--batches", "1"], "no such file or directory"),
])
def test_bad_uri_exits_2_naming_the_path(argv, needle, capsys):
    assert main(argv) == 2
    assert needle in capsys.readouterr().err


def test_empty_folder_exits_2(tmp_path, capsys):
    assert main(["inspect", str(tmp_path)]) == 2
    assert "no Parquet files" in capsys.readouterr().err


def test_not_parquet_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    assert main(["inspect", str(bad)]) == 2
    assert "bad.parquet" in capsys.readouterr().err


def test_unknown_column_exits_2(dataset, capsys):
    assert main(["inspect", dataset, "--columns", "nope"]) == 2
    assert "nope" in capsys.readouterr().err
    assert main(["bench", dataset, "--columns", "nope", "--batches", "1", "--no-progress"]) == 2
    assert "nope" in capsys.readouterr().err


@pytest.mark.parametrize("argv, needle", [
    (["bench", "DATA", "--batch-size", "0"], "--batch-size"),
    (["bench", "DATA", "--batches", "-3"], "--batches"),
    (["bench", "DATA", "--seconds", "abc"], "--seconds"),
    (["bench", "DATA", "--lists", "jagged"], "--lists"),
    (["bench", "DATA", "--batches", "1", "--seconds", "1"], "not allowed with"),
    (["inspect"], "uri"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_options_exit_2_naming_the_option(dataset, argv, needle, capsys):
    argv = [dataset if a == "DATA" else a for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert needle in capsys.readouterr().err


def test_bad_loader_option_value_exits_2(dataset, capsys):
    code = main(["bench", dataset, "--columns", "label", "--prefetch-bytes", "12XB",
                 "--batches", "1", "--no-progress"])
    assert code == 2
    assert "prefetch_bytes" in capsys.readouterr().err


def test_bench_without_lists_for_a_list_column_explains(dataset, capsys):
    assert main(["bench", dataset, "--columns", "tags", "--batches", "1", "--no-progress"]) == 2
    assert "lists" in capsys.readouterr().err


def test_bench_prints_rates_stages_and_verdict(dataset, capsys):
    code = main(["bench", dataset, "--columns", "label,emb,tags", "--features", "x,y",
                 "--lists", "padded", "--batch-size", "500", "--batches", "30", "--no-progress"])
    assert code == 0
    out = capsys.readouterr().out
    # 30 batches of 500 rows: more than one epoch of 6000 rows
    assert "15,000 rows in 30 batches" in out
    assert "rows/s" in out and "MB/s" in out
    assert "decode" in out  # a stage from loader.stats()
    verdict = [line for line in out.splitlines() if line.startswith("verdict: ")]
    assert len(verdict) == 1
    assert verdict[0].split(": ")[1].split(":")[0] in (
        "I/O-bound", "decode-bound", "transform-bound", "consumer")


def test_bench_seconds_stops(dataset, capsys):
    assert main(["bench", dataset, "--columns", "label", "--seconds", "0.5", "--no-progress"]) == 0
    assert "rows/s" in capsys.readouterr().out


def test_bottleneck_verdicts():
    from stoker._cli_bench import bottleneck

    def stage(name, pool, threads, busy):
        return {"name": name, "pool": pool, "threads": threads, "busy_s": busy, "wait_in_s": 0.0,
                "wait_out_s": 0.0, "items": 1, "bytes": 1}

    # Two workers busy 95% of the run, mostly decoding.
    decode_bound = {"stages": [stage("decode", "workers", 2, 1.5), stage("sequence", "sequencer", 1, 0.1),
                               stage("batch", "workers", 2, 0.4)], "consumer_wait_s": 0.8}
    verdict, category = bottleneck(decode_bound, 1.0)
    assert category == "decode-bound" and "95%" in verdict and "2 threads" in verdict
    # Workers mostly gathering rows: the verdict names the batch stage of the same pool.
    batch_bound = {"stages": [stage("decode", "workers", 2, 0.3), stage("batch", "workers", 2, 1.6)],
                   "consumer_wait_s": 0.8}
    assert bottleneck(batch_bound, 1.0)[1] == "batch-bound"
    # Plenty of workers: the single sequencer thread (90% busy) is what limits.
    sequencer = {"stages": [stage("decode", "workers", 8, 1.9), stage("sequence", "sequencer", 1, 0.9),
                            stage("batch", "workers", 8, 0.7)], "consumer_wait_s": 0.8}
    assert bottleneck(sequencer, 1.0)[1] == "sequence-bound"
    # A stage the CLI has never heard of (a future transform stage) is named all the same.
    new_stage = {"stages": [stage("decode", "workers", 2, 0.2), stage("transform", "workers", 2, 1.7)],
                 "consumer_wait_s": 0.5}
    verdict, category = bottleneck(new_stage, 1.0)
    assert category == "transform-bound" and "'transform'" in verdict
    consumer = {"stages": [stage("decode", "workers", 2, 0.5)], "consumer_wait_s": 0.01}
    assert bottleneck(consumer, 1.0)[1] == "consumer"


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


def test_inspect_lists_hive_partition_columns(hive_dataset, capsys):
    assert main(["inspect", hive_dataset, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    cols = {c["name"]: c for c in report["columns"]}
    assert set(cols) == {"v", "date", "region"}
    assert cols["date"]["partition"] is True and cols["date"]["kind"] == "strings"
    assert cols["region"]["partition"] is True and cols["region"]["dtype"] == "int64"
    assert main(["inspect", hive_dataset]) == 0
    out = capsys.readouterr().out
    assert "date" in out and "partition" in out


def test_inspect_accepts_partition_columns_in_columns(hive_dataset, capsys):
    assert main(["inspect", hive_dataset, "--columns", "date", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in report["columns"]] == ["date"]
    assert report["columns"][0]["produces"].startswith("strings")
    assert main(["inspect", hive_dataset, "--columns", "v,region"]) == 0


def test_row_group_advice_depends_on_the_dataset_size(tmp_path, capsys):
    # 80 MB uncompressed (PLAIN-encoded, zstd squeezes the counting sequence) in row groups of
    # 800 KB: big enough for a rewrite to help; the advice gives a row count for ~128 MiB.
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"z": np.arange(10_000_000, dtype=np.float64)}), path,
                   row_group_size=100_000, compression="zstd", use_dictionary=False)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "row groups are small" in out and "row_group_size=" in out
    rows = int(out.split("row_group_size=")[1].split(")")[0])
    assert 10_000_000 < rows * 8 * 1.3 and rows * 8 < 2**28  # about 128 MiB of float64


def test_bench_advice_uses_the_cli_flags(dataset, capsys):
    assert main(["bench", dataset, "--columns", "tags", "--batches", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--lists tags=padded" in err and "--lists tags=ragged" in err
    assert "lists={" not in err


def test_bench_takes_per_column_lists_time_unit_and_decimals(tmp_path, capsys):
    import decimal

    path = tmp_path / "typed.parquet"
    pq.write_table(pa.table({
        "tags": pa.array([[1, 2], [3]] * 50, pa.list_(pa.int64())),
        "ts": pa.array(list(range(100)), pa.timestamp("ms")),
        "price": pa.array([decimal.Decimal("1.25")] * 100, pa.decimal128(9, 2)),
    }), path)
    code = main(["bench", str(path), "--columns", "tags,ts,price", "--lists", "tags=padded",
                 "--time-unit", "ts=s", "--decimals", "float64", "--batches", "2",
                 "--batch-size", "10", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    # A missing choice is reported with its flag.
    assert main(["bench", str(path), "--columns", "price", "--batches", "1",
                 "--no-progress"]) == 2
    assert "--decimals price=float64" in capsys.readouterr().err


@pytest.mark.parametrize("argv, needle", [
    (["bench", "DATA", "--lists", "tags=jagged"], "--lists"),
    (["bench", "DATA", "--time-unit", "weeks"], "--time-unit"),
    (["bench", "DATA", "--decimals", "p=int"], "--decimals"),
])
def test_bad_per_column_flags_exit_2(dataset, argv, needle, capsys):
    argv = [dataset if a == "DATA" else a for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert needle in capsys.readouterr().err


def test_inspect_names_the_decimals_option(tmp_path, capsys):
    import decimal

    path = tmp_path / "dec.parquet"
    pq.write_table(pa.table({"price": pa.array([decimal.Decimal("1.25")] * 4,
                                               pa.decimal128(9, 2))}), path)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "column 'price' (decimal128(9, 2)) is a decimal: pass decimals=" in out
    assert "Leave it out" not in out
    assert main(["inspect", str(path), "--decimals", "price=float64", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["columns"][0]["produces"] == "dense float64 [B] (decimal128(9, 2) as float64)"
    assert report["warnings"] == []
