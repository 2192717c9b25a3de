"""``python -m bench.petastorm_format``: a Petastorm dataset read by Petastorm and by stoker.

The dataset is in Petastorm's on-disk format (rows encoded by the Unischema's codecs, the
Unischema and row-group counts added to ``_common_metadata`` by Petastorm's own functions): a
JPEG image (CompressedImageCodec, OpenCV-encoded), a float32 [16] embedding (NdarrayCodec) and
three scalars. One epoch each, rows delivered per second (median of ``--repeats``, interleaved
across the systems), every system decoding every field unless noted:

- Petastorm ``make_reader`` (its row path, thread pool, ``workers_count`` = the cores);
- Petastorm ``make_batch_reader`` (row groups as columns; it does not decode Petastorm codecs, so
  it hands out the encoded bytes: a bound on its speed, not a like-for-like reader);
- ``stoker.petastorm.make_reader`` (the migration shim: namedtuples of numpy per row);
- the native ``stoker.Loader`` (batches of decoded tensors);
- the limit: the image column's JPEG decode alone, on the same threads.

Writes bench/results/petastorm-format.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable, Dict, Iterator, List

import numpy as np

from .machine import describe
from .suite import ATTEMPTS, HERE

# Two image sizes per profile: where JPEG decoding dominates (both readers share libjpeg-turbo,
# so the gap narrows) and where the per-row work around it does.
PROFILES = {"smoke": {"rows": 256, "row_group_rows": 64, "files": 2, "sides": [32]},
            "quick": {"rows": 4096, "row_group_rows": 256, "files": 4, "sides": [96, 32]},
            "full": {"rows": 32768, "row_group_rows": 512, "files": 8, "sides": [160, 32]}}
SEED = 20261130


def _compat() -> None:
    from .runners import _petastorm_compat

    _petastorm_compat.apply()


def schema(side: int):
    _compat()
    from petastorm.codecs import CompressedImageCodec, NdarrayCodec, ScalarCodec
    from petastorm.unischema import Unischema, UnischemaField
    from pyspark.sql import types as T

    return Unischema("BenchSchema", [
        UnischemaField("id", np.int64, (), ScalarCodec(T.LongType()), False),
        UnischemaField("label", np.int32, (), ScalarCodec(T.IntegerType()), False),
        UnischemaField("score", np.float32, (), ScalarCodec(T.FloatType()), False),
        UnischemaField("image", np.uint8, (side, side, 3), CompressedImageCodec("jpeg", 90),
                       False),
        UnischemaField("embedding", np.float32, (16,), NdarrayCodec(), False),
    ])


def write_store(path: str, unischema, rows: List[Dict[str, Any]], row_group_rows: int,
                files: int) -> None:
    """Petastorm's format without Spark: codec-encoded rows written by pyarrow, then the
    Unischema and row-group counts added by Petastorm's own metadata functions."""
    _compat()
    import pyarrow as pa
    import pyarrow.parquet as pq
    from petastorm.etl import dataset_metadata
    from petastorm.utils import add_to_dataset_metadata

    os.makedirs(path, exist_ok=True)
    columns: Dict[str, list] = {name: [] for name in unischema.fields}
    arrow_fields = []
    for name, field in unischema.fields.items():
        encoded = field.codec is not None and type(field.codec).__name__ != "ScalarCodec"
        if encoded:
            arrow_fields.append(pa.field(name, pa.binary()))
        elif field.numpy_dtype in (np.str_, str):
            arrow_fields.append(pa.field(name, pa.string()))
        else:
            arrow_fields.append(pa.field(name, pa.from_numpy_dtype(np.dtype(field.numpy_dtype))))
        for row in rows:
            value = row.get(name)
            if value is not None and encoded:
                value = bytes(field.codec.encode(field, value))
            elif isinstance(value, np.generic):
                value = value.item()
            columns[name].append(value)
    table = pa.Table.from_pydict(columns, schema=pa.schema(arrow_fields))
    per_file = -(-len(rows) // files)
    for i in range(files):
        pq.write_table(table.slice(i * per_file, per_file),
                       os.path.join(path, f"part-{i:05d}.parquet"), row_group_size=row_group_rows)
    dataset = pq.ParquetDataset(path, validate_schema=False)
    dataset_metadata._generate_unischema_metadata(dataset, unischema)
    counts = {os.path.relpath(piece.path, path): piece.get_metadata().num_row_groups
              for piece in dataset.pieces}
    add_to_dataset_metadata(pq.ParquetDataset(path, validate_schema=False),
                            dataset_metadata.ROW_GROUPS_PER_FILE_KEY, json.dumps(counts))


def _photo(rng: np.random.Generator, side: int) -> np.ndarray:
    y, x = np.mgrid[0:side, 0:side]
    base = np.stack([(x * 3 + y) % 256, (y * 2 + 40) % 256, (x + y * 5) % 256], axis=-1)
    return np.clip(base + rng.integers(0, 24, base.shape), 0, 255).astype(np.uint8)


def ensure_store(data_dir: str, profile: str, side: int) -> str:
    spec = {k: v for k, v in PROFILES[profile].items() if k != "sides"}
    spec["side"] = side
    path = os.path.join(data_dir, profile, f"petastorm-format-{side}")
    manifest = os.path.join(path, "_manifest.json")  # "_": not data, for every reader
    if os.path.exists(manifest) and json.load(open(manifest)) == {**spec, "seed": SEED}:
        return path
    rng = np.random.default_rng(SEED)
    rows = [{"id": np.int64(i), "label": np.int32(i % 1000), "score": np.float32(rng.random()),
             "image": _photo(rng, spec["side"]),
             "embedding": rng.normal(size=16).astype(np.float32)} for i in range(spec["rows"])]
    write_store(path, schema(spec["side"]), rows, spec["row_group_rows"], spec["files"])
    with open(manifest, "w") as f:
        json.dump({**spec, "seed": SEED}, f)
    return path


# Each system: a function (path, threads) -> iterator of row counts, touching every value.

def _petastorm_rows(path: str, threads: int) -> Iterator[int]:
    _compat()
    from petastorm import make_reader

    with make_reader("file://" + path, num_epochs=1, workers_count=threads, seed=1) as reader:
        for row in reader:
            assert row.image.shape[2] == 3
            yield 1


def _petastorm_batches(path: str, threads: int) -> Iterator[int]:
    _compat()
    import warnings

    from petastorm import make_batch_reader

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "use make_reader for this dataset"
        with make_batch_reader("file://" + path, num_epochs=1, workers_count=threads,
                               seed=1) as reader:
            for batch in reader:
                yield len(batch.id)


def _shim_rows(path: str, threads: int) -> Iterator[int]:
    from stoker.petastorm import make_reader

    with make_reader("file://" + path, num_epochs=1, workers_count=threads, seed=1) as reader:
        for row in reader:
            assert row.image.shape[2] == 3
            yield 1


def _native(path: str, threads: int) -> Iterator[int]:
    import stoker

    loader = stoker.Loader(path, batch_size=256, seed=1, num_threads=threads, drop_last=False)
    for batch in loader:
        assert batch["image"].ndim == 4
        yield len(batch["id"])
    loader.close()


def _decode_limit(path: str, threads: int) -> Iterator[int]:
    """The JPEG decode alone on the same threads: the ceiling of any reader of this data."""
    import stoker
    from stoker import ops

    side = int(os.path.basename(path).rsplit("-", 1)[1])
    loader = stoker.Loader(path, columns=["image"], batch_size=256, shuffle=False,
                           num_threads=threads, drop_last=False, petastorm=False,
                           transforms={"image": [ops.decode_image(shape=[side, side])]})
    for batch in loader:
        yield len(batch["image"])
    loader.close()


SYSTEMS = (
    ("petastorm_make_reader", "Petastorm make_reader (rows)", _petastorm_rows),
    ("petastorm_make_batch_reader", "Petastorm make_batch_reader (columns, codecs NOT decoded)",
     _petastorm_batches),
    ("stoker_petastorm_make_reader", "stoker.petastorm.make_reader (rows)", _shim_rows),
    ("stoker_loader", "stoker.Loader (batches of 256, rows shuffled across the dataset)", _native),
    ("decode_limit", "limit: the JPEG decode alone (stoker, no shuffle, no other field)",
     _decode_limit),
)


def _time(fn: Callable[[str, int], Iterator[int]], path: str, threads: int) -> Dict[str, float]:
    start = time.perf_counter()
    cpu = os.times()
    rows = sum(fn(path, threads))
    wall = time.perf_counter() - start
    cpu_end = os.times()
    return {"rows": rows, "wall_s": wall, "rows_per_s": rows / wall,
            "cpu_s": (cpu_end.user + cpu_end.system) - (cpu.user + cpu.system)}


def _measure(path: str, rows: int, repeats: int, threads: int, warmup: int) -> Dict[str, Any]:
    # `warmup` untimed rounds first (each reader's first epoch in a process pays its imports and
    # first-time set-up, Petastorm's as much as stoker's), then the repeats interleaved across
    # the systems, so that a change in the machine's load falls on every system alike. A timed
    # epoch that ends short (Petastorm 0.13.1's thread pool could stop early, even with no
    # rows, before the compat shim fixed its race) is kept in the runs, counted, and measured
    # again, up to ATTEMPTS runs in the round.
    runs: Dict[str, list] = {key: [] for key, _, _ in SYSTEMS}
    warmups: Dict[str, list] = {key: [] for key, _, _ in SYSTEMS}
    errors: Dict[str, str] = {}
    for round_ in range(warmup + repeats):
        for key, label, fn in SYSTEMS:
            if key in errors:
                continue
            try:
                for _ in range(1 if round_ < warmup else ATTEMPTS):
                    run = _time(fn, path, threads)
                    (warmups if round_ < warmup else runs)[key].append(run)
                    if run["rows"] == rows:
                        break
                    if round_ >= warmup:
                        print(f"{label}: short epoch: delivered {run['rows']} of {rows} rows; "
                              "repeating", flush=True)
            except Exception as error:  # noqa: BLE001 - a failing system is reported, not fatal
                errors[key] = f"{type(error).__name__}: {error}"
    systems = {}
    for key, label, _ in SYSTEMS:
        entry: Dict[str, Any] = {"label": label, "runs": runs[key], "warmup_runs": warmups[key]}
        # Short epochs (above) are counted, not timed.
        full = [r for r in runs[key] if r["rows"] == rows]
        if key in errors:
            entry.update(status="failed", error=errors[key])
        elif not full:
            entry.update(status="failed", error=f"no run delivered all {rows} rows: "
                         f"{[r['rows'] for r in runs[key]]}")
        else:
            rates = sorted(r["rows_per_s"] for r in full)
            entry.update(status="ok", rows=rows, short_epochs=len(runs[key]) - len(full),
                         rows_per_s=rates[len(rates) // 2], best_rows_per_s=rates[-1])
        systems[key] = entry
        print(f"{label}: {entry.get('rows_per_s', entry.get('error'))}", flush=True)
    return systems


def run(profile: str, data_dir: str, out_dir: str, repeats: int, threads: int,
        warmup: int = 1) -> dict:
    spec = PROFILES[profile]
    report = {"profile": profile, **spec, "threads": threads, "repeats": repeats, "warmup": warmup,
              "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
              "machine": describe(), "workloads": {}}
    for side in spec["sides"]:
        path = ensure_store(data_dir, profile, side)
        print(f"-- {side}x{side} JPEG", flush=True)
        report["workloads"][str(side)] = {"side": side,
                                          "systems": _measure(path, spec["rows"], repeats, threads,
                                                              warmup)}
    from .report import write_report

    name = "petastorm-format" if profile == "quick" else f"petastorm-format-{profile}"
    write_report(report, out_dir, name, markdown(report))
    return report


def markdown(report: dict) -> str:
    lines = [f"# A Petastorm dataset read by Petastorm and by stoker ({report['profile']})", "",
             f"Run {report['started']}. {report['rows']} rows in {report['files']} files, row "
             f"groups of {report['row_group_rows']} rows: an RGB JPEG image "
             "(CompressedImageCodec, quality 90, encoded by OpenCV as Petastorm does), a float32 "
             "[16] NdarrayCodec field and three scalars, in Petastorm's on-disk format. One epoch, "
             f"{report['threads']} worker threads each, median of {report['repeats']} runs "
             f"interleaved across the systems after {report.get('warmup', 0)} untimed warm-up "
             "round(s) (each reader's first epoch in the process pays its imports), on a shared "
             f"{report['machine']['cores']}-core machine (load average at the start: "
             f"{', '.join(f'{x:.1f}' for x in report['machine']['load_average_at_start'] or [])}):"
             " compare within this run.", ""]
    for workload in report["workloads"].values():
        side = workload["side"]
        lines += [f"## {side}x{side}x3 JPEG", "",
                  "| system | rows/s (median) | best | first epoch in the process (untimed) | "
                  "stoker.petastorm.make_reader is | stoker.Loader is |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]
        systems = workload["systems"]
        shim = systems.get("stoker_petastorm_make_reader", {})
        native = systems.get("stoker_loader", {})
        for s in systems.values():
            if s["status"] != "ok":
                lines.append(f"| {s['label']} | failed: {s['error'][:80]} | | | | |")
                continue
            ratio = lambda base: (f"{base['rows_per_s'] / s['rows_per_s']:.1f}x"  # noqa: E731
                                  if base.get("status") == "ok" else "")
            short = f" ({s['short_epochs']} short epochs not timed)" if s.get("short_epochs") \
                else ""
            first = s.get("warmup_runs") or []
            first = f"{first[0]['rows_per_s']:,.0f}" if first else ""
            lines.append(f"| {s['label']}{short} | {s['rows_per_s']:,.0f} | "
                         f"{s['best_rows_per_s']:,.0f} | {first} | {ratio(shim)} | "
                         f"{ratio(native)} |")
        lines.append("")
    lines += ["Both readers decode JPEG with libjpeg-turbo (OpenCV's wheel and stoker), with the "
              "same pixels; where the decode dominates, the gap is the per-row work around it. "
              "Petastorm's make_batch_reader does not decode Petastorm codecs: its row is a bound, "
              "not a like-for-like reader."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.petastorm_format", description=__doc__)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed rounds of every system before the timed ones")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    parser.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    report = run(args.profile, args.data_dir, args.out_dir, args.repeats, args.threads,
                 args.warmup)
    return 0 if all(s["status"] == "ok" for w in report["workloads"].values()
                    for s in w["systems"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
