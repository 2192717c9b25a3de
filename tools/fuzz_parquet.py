"""Mutation fuzzing of stoker's decode path.

A seeded corpus of small valid Parquet files (pyarrow with every codec, data page v1 and v2,
dictionary on/off/fallback, many pages, empty row groups, nulls, strings, lists; DuckDB, Polars and
fastparquet when installed) is mutated (bit flips, truncation, zeroed ranges, the footer length
field, random bytes in page headers and in the footer) and each mutant is read by a worker
subprocess: first by pyarrow (the reference), then by ``stoker.describe`` (footers only), then a stoker Loader over the whole file (every column or a
seeded subset, ``shuffle=False``, every batch, seeded batch size, threads and list mode).

Outcomes and what counts as correct (docs/user-guide.md, "Files from other writers, and corrupt
files"):

- stoker reads it and pyarrow reads it: the values must be equal, value for value (nulls included).
- stoker raises an error that subclasses ``stoker.errors.StokerError`` (other than
  ``InternalError``, which is stoker's own "this is a bug"): correct, whatever pyarrow does. A
  mutant pyarrow accepts may still be refused: stoker checks more than pyarrow does (e.g. a row
  group whose row count disagrees with its column chunks, or a schema it cannot deliver).
- stoker reads it but pyarrow's ``read_table`` fails: correct only when pyarrow, asked for exactly
  what stoker delivered (the same columns, row group by row group, skipping row groups the footer
  says are empty), reads it and the values are equal. Otherwise it is a silent acceptance of a file
  the reference refuses and is reported (``accepted_unverified``).
- a signal (crash), a timeout (hang), any other exception type, or unequal values: a finding. The
  input is saved under ``--crash-dir`` with a ``.txt`` note (mutation, outcome, stderr tail).

Run: ``python tools/fuzz_parquet.py --iterations 2000 --seed 1`` (``make fuzz``). The short run of
``make test`` is tests/system/test_fuzz.py. Every mutant is a pure function of (seed, iteration),
so a finding is reproduced with ``--seed S --only I``.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import io
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def _traceback() -> str:
    """The current traceback with paths relative to the repository (saved inputs are committed)."""
    import traceback

    return traceback.format_exc().replace(REPO + os.sep, "")
# Findings; tests/system/test_fuzz.py replays them.
CRASH_DIR = os.path.join(REPO, "tests", "data", "fuzz_crashes")

# ------------------------------------------------------------------------------------ corpus


def _pyarrow_table(rows: int, seed: int):
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    valid = rng.random(rows) > 0.2
    words = ["", "a", "héllo", "日本語", "x" * 40, "tab\tnl\n"]
    lengths = rng.integers(0, 5, rows)
    return pa.table({
        "i8": pa.array(rng.integers(-128, 128, rows).astype(np.int8)),
        "i16": pa.array(rng.integers(-2**15, 2**15, rows).astype(np.int16), mask=~valid),
        "i32": pa.array(rng.integers(-2**31, 2**31, rows).astype(np.int32)),
        "i64": pa.array(rng.integers(-2**62, 2**62, rows), mask=~valid),
        "u8": pa.array(rng.integers(0, 256, rows).astype(np.uint8)),
        "u32": pa.array(rng.integers(0, 2**32, rows).astype(np.uint32)),
        "u64": pa.array(rng.integers(0, 2**63, rows).astype(np.uint64) * 2 + 1),
        "f32": pa.array(rng.standard_normal(rows).astype(np.float32), mask=~valid),
        "f64": pa.array(rng.standard_normal(rows)),
        "b": pa.array(rng.random(rows) < 0.5, mask=~valid),
        "s": pa.array([words[i % 6] + str(i % 7) for i in range(rows)], mask=~valid),
        "lowcard": pa.array([words[i % 3] for i in range(rows)]),
        "bin": pa.array([bytes([i % 256]) * (i % 5) for i in range(rows)], pa.binary()),
        "li": pa.array([list(range(i, i + int(k))) for i, k in enumerate(lengths)],
                       pa.list_(pa.int32()), mask=~valid),
        "lf": pa.array([[float(i) / 3] * int(k) for i, k in enumerate(lengths)],
                       pa.list_(pa.float64())),
    })


def _pyarrow_variants() -> List[Tuple[str, Dict[str, Any]]]:
    variants = []
    for codec in ("none", "snappy", "gzip", "brotli", "zstd", "lz4"):
        variants.append((f"pa-{codec}", dict(compression=codec)))
    variants += [
        ("pa-v2pages", dict(data_page_version="2.0", compression="zstd")),
        ("pa-v2pages-none", dict(data_page_version="2.0", compression="none")),
        ("pa-nodict", dict(use_dictionary=False, compression="none")),
        ("pa-dictfallback", dict(dictionary_pagesize_limit=64, compression="snappy")),
        ("pa-smallpages", dict(data_page_size=128, write_batch_size=16, compression="none")),
        ("pa-v1format", dict(version="1.0", compression="gzip")),
        ("pa-stats-off", dict(write_statistics=False, compression="none",
                              write_page_index=True)),
        ("pa-crc", dict(write_page_checksum=True, compression="none")),
        ("pa-format2.4-v2pages-dictfallback", dict(version="2.4", data_page_version="2.0",
                                                   dictionary_pagesize_limit=32,
                                                   compression="lz4")),
    ]
    return variants


def make_corpus(folder: str, seed: int = 0) -> List[str]:
    """Writes the corpus (deterministic for a seed and the writers' versions); returns the paths."""
    import pyarrow.parquet as pq

    os.makedirs(folder, exist_ok=True)
    paths = []
    table = _pyarrow_table(120, seed)
    for name, kwargs in _pyarrow_variants():
        path = os.path.join(folder, name + ".parquet")
        pq.write_table(table, path, row_group_size=50, **kwargs)
        paths.append(path)
    # Empty row groups around real ones (row counts of 0 that must agree with their chunks).
    path = os.path.join(folder, "pa-emptyrowgroups.parquet")
    with pq.ParquetWriter(path, table.schema, compression="snappy") as writer:
        for start, length in ((0, 0), (0, 60), (60, 0), (60, 60), (120, 0)):
            writer.write_table(table.slice(start, length))
    paths.append(path)
    try:
        import duckdb

        path = os.path.join(folder, "duckdb.parquet")
        con = duckdb.connect()
        con.execute(
            "COPY (SELECT i::INTEGER AS i, (i * 3)::BIGINT AS big, i / 7.0 AS d, "
            "CASE WHEN i % 4 = 0 THEN NULL ELSE 'v' || (i % 9)::VARCHAR END AS s, "
            "i % 2 = 0 AS flag, [i, i + 1] AS l FROM range(300) t(i)) "
            f"TO '{path}' (FORMAT parquet, ROW_GROUP_SIZE 100)")
        con.close()
        paths.append(path)
    except ImportError:
        pass
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its import warns on pandas 3
            import fastparquet  # noqa: F401

        path = os.path.join(folder, "fastparquet.parquet")
        frame = table.select(["i16", "i64", "f32", "f64", "b", "s", "lowcard"]).to_pandas()
        frame["cat"] = frame["lowcard"].astype("category")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pandas 3 deprecates the engine
            frame.to_parquet(path, engine="fastparquet", compression="SNAPPY",
                             row_group_offsets=50)
        paths.append(path)
    except ImportError:
        pass
    try:
        import polars as pl

        path = os.path.join(folder, "polars.parquet")
        pl.from_arrow(table.select(["i32", "i64", "f64", "s", "li"])).write_parquet(
            path, row_group_size=40)
        paths.append(path)
    except ImportError:
        pass
    return paths


# ------------------------------------------------------------------------ Thrift compact walk


class _Thrift:
    """Just enough of the Thrift compact protocol to skip structs and read i32 fields."""

    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos = data, pos

    def byte(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def varint(self) -> int:
        shift = result = 0
        for _ in range(10):
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
        raise ValueError("varint too long")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def skip(self, kind: int) -> None:
        if kind in (1, 2):  # bool true/false inside a struct
            return
        if kind == 3:
            self.pos += 1
        elif kind in (4, 5, 6):
            self.varint()
        elif kind == 7:
            self.pos += 8
        elif kind == 8:
            size = self.varint()  # read before self.pos is: `self.pos += varint()` loses a byte
            self.pos += size
        elif kind in (9, 10):
            head = self.byte()
            size, elem = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            for _ in range(size):
                self.skip(elem) if elem not in (1, 2) else self.byte()
        elif kind == 11:
            size = self.varint()
            if size:
                kinds = self.byte()
                for _ in range(size):
                    self.skip(kinds >> 4)
                    self.skip(kinds & 0x0F)
        elif kind == 12:
            self.struct()
        else:
            raise ValueError(f"thrift type {kind}")

    def struct(self) -> Dict[int, int]:
        """Skips a struct; returns its integer fields by id."""
        fields: Dict[int, int] = {}
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return fields
            delta, kind = head >> 4, head & 0x0F
            fid = last + delta if delta else self.zigzag()
            last = fid
            if kind in (5, 6):
                fields[fid] = self.zigzag()
            else:
                self.skip(kind)


def page_headers(data: bytes) -> List[Tuple[int, int]]:
    """(start, length) of every page header of every column chunk of a valid file."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    spans = []
    for r in range(meta.num_row_groups):
        group = meta.row_group(r)
        for c in range(group.num_columns):
            chunk = group.column(c)
            start = chunk.dictionary_page_offset if chunk.has_dictionary_page else None
            start = chunk.data_page_offset if start is None or start <= 0 else start
            end = start + chunk.total_compressed_size
            pos = start
            while pos < end:
                reader = _Thrift(data, pos)
                try:
                    fields = reader.struct()
                except (ValueError, IndexError):
                    break
                spans.append((pos, reader.pos - pos))
                pos = reader.pos + max(fields.get(3, 0), 0)
    return spans


# -------------------------------------------------------------------------------- mutations


def _footer_start(data: bytes) -> int:
    length = int.from_bytes(data[-8:-4], "little")
    return max(4, len(data) - 8 - length)


def mutate(data: bytes, rng: random.Random, headers: List[Tuple[int, int]]) -> Tuple[bytes, str]:
    """One to three mutations; returns the mutant and a description."""
    out = bytearray(data)
    notes = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        kind = rng.choice(("bitflip", "bitflip", "truncate", "zero", "footer_len", "header",
                           "header", "footer_bytes", "overwrite"))
        n = len(out)
        if n < 16:
            break
        if kind == "bitflip":
            flips = [rng.randrange(n * 8) for _ in range(rng.randint(1, 8))]
            for bit in flips:
                out[bit // 8] ^= 1 << (bit % 8)
            notes.append(f"bitflip{flips}")
        elif kind == "truncate":
            cut = rng.choice((rng.randrange(n), n - rng.randint(1, 16), rng.randint(0, 12)))
            del out[cut:]
            notes.append(f"truncate@{cut}")
        elif kind == "zero":
            start = rng.randrange(n)
            length = rng.choice((1, 4, 16, 64, 512))
            out[start:start + length] = bytes(len(out[start:start + length]))
            notes.append(f"zero[{start}:+{length}]")
        elif kind == "footer_len":
            length = int.from_bytes(out[-8:-4], "little")
            value = rng.choice((0, 1, length - 1, length + 1, length * 2, n - 8, n - 7, n,
                                2**31 - 1, 2**32 - 1, rng.randrange(2**32)))
            out[-8:-4] = (value % 2**32).to_bytes(4, "little")
            notes.append(f"footer_len={value % 2**32}")
        elif kind == "header" and headers:
            start, length = rng.choice(headers)
            for _ in range(rng.randint(1, 3)):
                pos = start + rng.randrange(max(length, 1))
                if pos < len(out):
                    out[pos] = rng.randrange(256)
            notes.append(f"header@{start}")
        elif kind in ("footer_bytes", "header"):
            start = _footer_start(bytes(out))
            pos = rng.randrange(start, max(start + 1, len(out) - 8))
            value = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
            out[pos] = value
            notes.append(f"footer[{pos}]={value}")
        else:  # overwrite a short run with random bytes
            start = rng.randrange(n)
            run = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
            out[start:start + len(run)] = run
            del out[n:]
            notes.append(f"overwrite@{start}")
    return bytes(out), "+".join(notes) or "none"


# ----------------------------------------------------------------------------------- worker
# The worker is this file run with --worker: it reads one path per line and answers one JSON
# line per path. It prints "phase <name>" lines before each step so a crash is attributed to
# pyarrow or to stoker.

def _canon(value: Any) -> Any:
    """Hashable, exact form (NaN equals NaN, -0.0 differs from 0.0)."""
    import math
    import struct

    if isinstance(value, float):
        return ("f", "nan" if math.isnan(value) else struct.pack("<d", value))
    if isinstance(value, list):
        return tuple(_canon(v) for v in value)
    if isinstance(value, str):
        return ("s", value.encode("utf-8", "surrogatepass"))
    return value


def _pyarrow_rows(table) -> Dict[str, list]:
    import pyarrow as pa

    out = {}
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        # Strings as bytes: a mutant may hold invalid UTF-8, which neither reader validates.
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            col = col.cast(pa.large_binary())
        out[name] = [_canon(v) for v in col.to_pylist()]
    return out


def _column_rows(value: Any) -> list:
    import numpy as np
    import stoker

    if isinstance(value, stoker.Ragged):
        values, offsets = np.asarray(value.values), np.asarray(value.offsets)
        if value.kind in ("utf8", "binary"):
            raw = values.tobytes()
            return [raw[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]
        return [values[offsets[i]:offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]
    return np.asarray(value).tolist()


def _stoker_rows(path: str, read: Dict[str, Any]) -> Dict[str, list]:
    """Every (requested) column of an epoch; null rows as None."""
    import numpy as np
    import stoker

    loader = stoker.Loader(path, shuffle=False, drop_last=False, null_mask=True, **read)
    try:
        names = list(loader.columns)
        out: Dict[str, list] = {n: [] for n in names}
        for batch in loader:
            for name in names:
                if name + "_lengths" in batch:  # padded: [B, L] and the lengths
                    lengths = np.asarray(batch[name + "_lengths"])
                    rows = np.asarray(batch[name])
                    values = [rows[i, :k].tolist() for i, k in enumerate(lengths)]
                else:
                    values = _column_rows(batch[name])
                mask = batch.get(name + "_mask")
                if mask is not None:
                    values = [v if ok else None for v, ok in zip(values, np.asarray(mask))]
                out[name].extend(_canon(v) for v in values)
    finally:
        loader.close()
    return out


def _compare(got: Dict[str, list], want: Dict[str, list]) -> str:
    if set(got) != set(want):
        return f"columns differ: stoker {sorted(got)} pyarrow {sorted(want)}"
    for name in want:
        if len(got[name]) != len(want[name]):
            return f"{name}: {len(got[name])} rows vs pyarrow {len(want[name])}"
        for i, (a, b) in enumerate(zip(got[name], want[name])):
            if a != b:
                return f"{name} row {i}: stoker {a!r} pyarrow {b!r}"
    return ""


def _fallback_reference(path: str, columns: List[str]) -> Dict[str, list]:
    """pyarrow reading only what stoker delivered: these columns, row group by row group."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    parts = [f.read_row_group(r, columns=columns) for r in range(f.metadata.num_row_groups)
             if f.metadata.row_group(r).num_rows > 0]
    table = pa.concat_tables(parts) if parts else f.schema_arrow.empty_table().select(columns)
    return _pyarrow_rows(table)


def _read_one(path: str, read: Dict[str, Any]) -> Dict[str, Any]:
    import pyarrow.parquet as pq
    from stoker.errors import InternalError, StokerError

    read = dict(read)
    subset = read.pop("subset_seed", None)
    if subset is not None:  # a projection: damage in other columns is not stoker's to see
        try:
            names = pq.read_schema(path).names
        except Exception:  # noqa: BLE001 - an unreadable footer: read everything
            names = []
        if names:
            picker = random.Random(subset)
            read["columns"] = picker.sample(names, picker.randint(1, len(names)))
    print("phase pyarrow", flush=True)
    try:
        want: Optional[Dict[str, list]] = _pyarrow_rows(
            pq.read_table(path, columns=read.get("columns")))
        pa_error = ""
    except Exception as error:  # noqa: BLE001 - any pyarrow failure is "pyarrow refuses"
        want, pa_error = None, f"{type(error).__name__}: {str(error)[:200]}"
    print("phase describe", flush=True)  # footers only: what `stoker inspect` shows
    try:
        import stoker

        stoker.describe(path)
    except StokerError as error:
        if isinstance(error, InternalError):
            return dict(outcome="internal_error", detail=f"describe: {error}"[:500])
    except Exception as error:  # noqa: BLE001 - an untyped error is a finding
        return dict(outcome="untyped_error",
                    detail=f"describe: {type(error).__name__}: {error}\n{_traceback()}"[-2000:],
                    pyarrow=pa_error)
    print("phase stoker", flush=True)
    try:
        got = _stoker_rows(path, read)
    except InternalError as error:
        return dict(outcome="internal_error", detail=f"{error}"[:500], pyarrow=pa_error)
    except StokerError as error:
        return dict(outcome="typed_error", detail=f"{type(error).__name__}: {str(error)[:300]}",
                    pyarrow=pa_error)
    except Exception as error:  # noqa: BLE001 - an untyped error is a finding
        return dict(outcome="untyped_error",
                    detail=f"{type(error).__name__}: {error}\n{_traceback()}"[-2000:],
                    pyarrow=pa_error)
    if want is not None:
        diff = _compare(got, want)
        return dict(outcome="silent_difference" if diff else "equal", detail=diff)
    print("phase pyarrow-fallback", flush=True)
    try:
        diff = _compare(got, _fallback_reference(path, list(got)))
    except Exception as error:  # noqa: BLE001
        return dict(outcome="accepted_unverified", pyarrow=pa_error,
                    detail=f"pyarrow per row group: {type(error).__name__}: {error}"[:500])
    return dict(outcome="silent_difference" if diff else "equal_fallback", detail=diff,
                pyarrow=pa_error)


def worker_main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        # tests/system/test_fuzz.py checks the harness sees each failure
        selftest = job.get("selftest")
        if selftest == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif selftest == "hang":
            time.sleep(3600)
        result = _read_one(job["path"], job.get("read", DEFAULT_READ))
        if selftest == "differ" and result["outcome"] == "equal":
            result = dict(outcome="silent_difference", detail="selftest")
        print("result " + json.dumps(result), flush=True)


# ----------------------------------------------------------------------------------- driver

DEFAULT_READ: Dict[str, Any] = dict(batch_size=97, num_threads=1, lists="ragged")


def read_options(rng: random.Random) -> Dict[str, Any]:
    """How one mutant is read: batch size, threads, list mode, sometimes a column subset."""
    return dict(batch_size=rng.choice((1, 7, 97, 1000)), num_threads=rng.choice((1, 1, 2)),
                lists=rng.choice(("ragged", "padded")),
                subset_seed=rng.randrange(2**31) if rng.random() < 0.25 else None)

GOOD = {"equal", "equal_fallback", "typed_error"}


class Worker:
    """A persistent worker subprocess; restarted after a crash or a hang."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.proc: Optional[subprocess.Popen] = None
        self.buffer = b""
        self.err = tempfile.TemporaryFile()

    def start(self) -> None:
        env = dict(os.environ, PYTHONFAULTHANDLER="1")
        self.err.seek(0)
        self.err.truncate()
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.err, env=env, text=True,
            start_new_session=True)

    def stderr_tail(self) -> str:
        self.err.flush()
        self.err.seek(0)
        return self.err.read()[-3000:].decode("utf-8", "replace")

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            self._close_pipes()

    def _close_pipes(self) -> None:
        if self.proc is not None:
            for pipe in (self.proc.stdin, self.proc.stdout):
                try:
                    if pipe is not None:
                        pipe.close()
                except OSError:  # a broken pipe on a dead worker's stdin
                    pass
            self.proc = None

    def close(self) -> None:
        self.stop()
        self.err.close()

    def _line(self, deadline: float) -> Optional[str]:
        """The worker's next output line; None at the deadline, "" at end of output."""
        assert self.proc and self.proc.stdout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(left, 0))
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return ""
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode("utf-8", "replace") + "\n"

    def run(self, path: str, read: Optional[Dict[str, Any]] = None,
            selftest: Optional[str] = None) -> Dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        assert self.proc and self.proc.stdin
        self.buffer = b""
        self.err.seek(0)
        self.err.truncate()
        try:
            job = dict(path=path, read=read or DEFAULT_READ, selftest=selftest)
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        phase = "start"
        deadline = time.monotonic() + self.timeout
        while True:
            line = self._line(deadline)
            if line is None:
                self.stop()
                return dict(outcome="hang", phase=phase, detail=f"no answer in {self.timeout} s")
            if not line:
                code = self.proc.wait()
                tail = self.stderr_tail()
                self._close_pipes()
                return dict(outcome="crash", phase=phase, detail=f"exit {code}", stderr=tail)
            if line.startswith("phase "):
                phase = line.split()[1]
            elif line.startswith("result "):
                return json.loads(line[7:])


def save_finding(data: bytes, note: Dict[str, Any], crash_dir: str) -> str:
    os.makedirs(crash_dir, exist_ok=True)
    digest = hashlib.sha256(data).hexdigest()[:16]
    path = os.path.join(crash_dir, f"{note['outcome']}-{digest}.parquet")
    with open(path, "wb") as f:
        f.write(data)
    with open(path[:-len(".parquet")] + ".txt", "w") as f:
        json.dump(note, f, indent=1, sort_keys=True)
        f.write("\n")
    return path


def fuzz(iterations: int, seed: int, timeout: float = 30.0, crash_dir: str = CRASH_DIR,
         workers: int = 1, only: Optional[int] = None, log: Callable[[str], None] = print,
         time_budget: Optional[float] = None) -> Dict[str, Any]:
    """Runs the campaign; returns counts by outcome and the findings (with saved paths)."""
    work = tempfile.mkdtemp(prefix="stoker-fuzz-")
    pool = [Worker(timeout) for _ in range(max(1, workers))]
    counts: Dict[str, int] = {}
    findings: List[Dict[str, Any]] = []
    started = time.monotonic()
    try:
        corpus = make_corpus(os.path.join(work, "corpus"), seed=0)
        seeds = []
        for p in corpus:
            with open(p, "rb") as f:
                seeds.append((p, f.read()))
        headers = {p: page_headers(d) for p, d in seeds}
        # The unmutated corpus must read equal (checks the harness itself); then the mutants,
        # each made when a worker is free (a long run does not hold them all in memory).
        pending = collections.deque(range(-len(seeds), 0) if only is None else [])
        pending.extend(range(iterations) if only is None else [only])

        def make_job(i: int) -> Tuple[int, str, bytes, str, Dict[str, Any]]:
            if i < 0:
                p, d = seeds[-1 - i]
                return i, os.path.basename(p), d, "none", DEFAULT_READ
            rng = random.Random(f"{seed}:{i}")
            p, d = seeds[rng.randrange(len(seeds))]
            mutant, how = mutate(d, rng, headers[p])
            return i, os.path.basename(p), mutant, how, read_options(rng)

        # Threads only wait: each drives one worker subprocess, which does the work.
        import concurrent.futures as cf

        def one(worker: Worker, job) -> Tuple[Any, Dict[str, Any]]:
            i, base, mutant, how, read = job
            path = os.path.join(work, f"in-{i}-{id(worker)}.parquet")
            with open(path, "wb") as f:
                f.write(mutant)
            try:
                return job, worker.run(path, read)
            finally:
                os.unlink(path)

        with cf.ThreadPoolExecutor(len(pool)) as ex:
            free = list(pool)
            futures: Dict[Any, Worker] = {}
            while pending or futures:
                while free and pending and not (
                        time_budget and time.monotonic() - started > time_budget):
                    w = free.pop()
                    futures[ex.submit(one, w, make_job(pending.popleft()))] = w
                if not futures:
                    break
                done, _ = cf.wait(list(futures), return_when=cf.FIRST_COMPLETED)
                for fut in done:
                    free.append(futures.pop(fut))
                    job, result = fut.result()
                    i, base, mutant, how, read = job
                    outcome = result["outcome"]
                    counts[outcome] = counts.get(outcome, 0) + 1
                    if i < 0 and outcome != "equal":
                        outcome = result["outcome"] = "corpus_" + outcome
                    if outcome not in GOOD:
                        note = dict(result, seed=seed, iteration=i, source=base, mutation=how,
                                    read=read)
                        note["saved"] = save_finding(mutant, note, crash_dir)
                        findings.append(note)
                        log(f"FINDING {outcome} iteration {i} ({base}: {how}): "
                            f"{result.get('detail', '')[:300]}")
        counts["ran"] = sum(v for k, v in counts.items() if k != "ran")
        counts["skipped_by_time"] = len(pending)
    finally:
        for w in pool:
            w.close()
        shutil.rmtree(work, ignore_errors=True)
    return dict(counts=counts, findings=findings, seconds=round(time.monotonic() - started, 1))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per input (hang)")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--only", type=int, default=None, help="run only this iteration")
    parser.add_argument("--crash-dir", default=CRASH_DIR)
    args = parser.parse_args(argv)
    if args.worker:
        worker_main()
        return 0
    report = fuzz(args.iterations, args.seed, args.timeout, args.crash_dir, args.workers,
                  args.only)
    print(json.dumps(dict(counts=report["counts"], seconds=report["seconds"]), sort_keys=True))
    for f in report["findings"]:
        print(f"finding: {f['outcome']} seed {f['seed']} iteration {f['iteration']} "
              f"-> {f['saved']}")
    return 1 if report["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
