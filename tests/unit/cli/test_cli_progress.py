"""The progress line of the long commands: drawn on stderr (carriage returns) when stderr is a
terminal (a pty here), absent when it is not, and absent with --quiet. stdout holds the report
in every case. The commands run as users run them: the console script in a subprocess."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker

STOKER = os.path.join(os.path.dirname(sys.executable), "stoker")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    folder = tmp_path_factory.mktemp("progress")
    for f in range(3):
        pq.write_table(pa.table({"x": np.arange(2000, dtype=np.float32) + f}),
                       folder / f"part-{f}.parquet", row_group_size=500)
    return str(folder)


@pytest.fixture(scope="module")
def cache(dataset, tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("progress_cache"))
    with stoker.Loader(dataset, batch_size=100, cache_dir=folder) as loader:
        for _ in loader:
            pass
        loader.flush_cache()
    return folder


def run_on_a_tty(*args, timeout=120):
    """(returncode, stdout, stderr as the terminal received it) with stderr on a pty."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([STOKER, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=slave)
    os.close(slave)
    received = io.BytesIO()
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the command exited and closed the terminal
            break
        if not chunk:
            break
        received.write(chunk)
    os.close(master)
    out = proc.stdout.read().decode()
    proc.stdout.close()
    return proc.wait(timeout=timeout), out, received.getvalue().decode()


def run_piped(*args):
    result = subprocess.run([STOKER, *args], capture_output=True, text=True, timeout=120)
    return result.returncode, result.stdout, result.stderr


BENCH = ["bench", "DATA", "--batch-size", "50", "--batches", "60", "--step-ms", "10"]
COMMANDS = {
    "bench": (BENCH, "stoker bench: ", "batches"),
    "inspect": (["inspect", "DATA"], "stoker inspect: reading footers", ""),
    "cache stats": (["cache", "stats", "CACHE"], "stoker cache stats: scanning", ""),
}


def _args(args, dataset, cache):
    return [dataset if a == "DATA" else cache if a == "CACHE" else a for a in args]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_terminal_gets_a_progress_line(dataset, cache, command):
    args, label, detail = COMMANDS[command]
    code, out, err = run_on_a_tty(*_args(args, dataset, cache))
    assert code == 0, err
    assert label in err and "\r" in err and detail in err
    # The line is erased at the end: the terminal's last write is a carriage return, and the
    # report on stdout has no trace of it.
    assert err.endswith("\r") and "\r" not in out
    assert out.strip()


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("how", ["quiet on a terminal", "piped"])
def test_no_progress_line_when_quiet_or_piped(dataset, cache, command, how):
    args, label, _ = COMMANDS[command]
    args = _args(args, dataset, cache)
    if how == "piped":
        code, out, err = run_piped(*args)
    else:
        code, out, err = run_on_a_tty(*args, "--quiet")
    assert code == 0, err
    assert err == "" and out.strip()


def test_bench_progress_counts_batches_to_the_total(dataset):
    code, out, err = run_on_a_tty(*_args(BENCH, dataset, ""))
    assert code == 0, err
    counts = [int(part.split("/")[0].replace(",", "")) for part in err.split("stoker bench: ")[1:]
              if "/60 batches" in part]
    assert counts and counts == sorted(counts) and counts[-1] <= 60
    assert "60 batches" in out
