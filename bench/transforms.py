"""``python -m bench.transforms``: tabular data with transforms, stoker vs the peers.

The workload (issue 11): standardise 200 float features, hash 20 categorical string columns into
2**20 buckets, pad a variable-length list. Every runner delivers the same batch layout: features
``[B, 200]`` float32 (standardised), ``ids`` ``[B, 20]`` int64, ``tags`` ``[B, 16]`` int64 padded +
``tags_lengths``, ``label``. Runners (bench/runners/xform_*.py), each measured in a fresh process,
repeats interleaved:

- ``xform_stoker_plain``: stoker reading the same columns without any transform (the baseline for
  the "native ops cost <= 10%" target): raw features stacked, strings as stoker delivers them.
- ``xform_stoker_ops``: stoker's native ops (``standardize`` per feature before stacking,
  ``hash_bucket`` per string column) on its C++ workers.
- ``xform_stoker_py`` / ``xform_stoker_py_procs``: stoker ``transform=`` running the same numpy /
  pandas code as the peers, in the engine's threads / in ``python_workers`` processes.
- ``xform_petastorm``: Petastorm with the study's settings and the same code as a pandas
  ``TransformSpec`` in its thread pool.
- ``xform_dataloader``: a torch DataLoader whose workers read with pyarrow and run the same code.

Python-side hashing is ``pandas.util.hash_array`` (vectorised) modulo the bucket count; stoker's
native ``hash_bucket`` is FNV-1a (docs/user-guide.md): different functions, the same work.
Writes bench/results/transforms-<profile>.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Dict, List

import numpy as np

from . import machine, metrics
from .generators import _read_manifest, _write_manifest
from .suite import HERE, measure

NUM_FLOAT = 200
NUM_CAT = 20
BUCKETS = 1 << 20
MAX_TAGS = 16
BATCH_SIZE = 4096
GENERATOR_VERSION = 1

RUNNERS = (
    ("xform_stoker_plain", "stoker, no transforms (baseline)"),
    ("xform_stoker_ops", "stoker, native ops"),
    ("xform_stoker_py", "stoker, transform= (threads)"),
    ("xform_stoker_py_procs", "stoker, transform= (python_workers=2)"),
    ("xform_petastorm", "Petastorm (study's fixes) + TransformSpec"),
    ("xform_dataloader", "PyTorch DataLoader + pyarrow, transform in workers"),
)


@dataclass(frozen=True)
class Spec:
    rows: int
    row_group_rows: int
    files: int
    seed: int = 99


SPECS = {"smoke": Spec(rows=4_000, row_group_rows=1_000, files=2),
         "quick": Spec(rows=160_000, row_group_rows=10_000, files=4),
         "full": Spec(rows=1_600_000, row_group_rows=50_000, files=16)}
REPEATS = {"smoke": 1, "quick": 3, "full": 5}


def float_names() -> List[str]:
    return [f"f{i:03d}" for i in range(NUM_FLOAT)]


def cat_names() -> List[str]:
    return [f"c{i:02d}" for i in range(NUM_CAT)]


def moments() -> Dict[str, tuple]:
    """The (mean, std) each float feature is drawn with: what the transforms standardise by."""
    return {name: (0.25 * (j % 9) - 1.0, 0.5 + 0.1 * (j % 7)) for j, name in enumerate(float_names())}


def _table(rng: np.random.Generator, rows: int):
    import pyarrow as pa

    arrays = {}
    for name, (mean, std) in moments().items():
        arrays[name] = pa.array((rng.standard_normal(rows) * std + mean).astype(np.float32))
    for j, name in enumerate(cat_names()):
        # Low-cardinality strings, as pandas or Spark write a categorical: dictionary-encoded.
        vocabulary = np.array([f"{name}_value_{k}" for k in range([10, 100, 1000, 5000][j % 4])])
        arrays[name] = pa.array(vocabulary[rng.integers(0, len(vocabulary), rows)])
    lengths = rng.integers(0, MAX_TAGS + 1, rows)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    arrays["tags"] = pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(rng.integers(0, 100_000, int(offsets[-1]), dtype=np.int64)))
    arrays["label"] = pa.array(rng.integers(0, 2, rows, dtype=np.int64))
    return pa.table(arrays)


def ensure_data(root: str, spec: Spec, log=print) -> str:
    import shutil

    import pyarrow.parquet as pq

    path = os.path.join(root, "tabular-xform")
    wanted = {"version": GENERATOR_VERSION, "kind": "tabular-xform", **asdict(spec)}
    if _read_manifest(path) == wanted:
        return path
    log(f"generating tabular-xform ({spec.rows:,} rows) in {path}")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    rng = np.random.default_rng(spec.seed)
    per_file = spec.rows // spec.files
    for f in range(spec.files):
        with pq.ParquetWriter(os.path.join(path, f"part-{f:03d}.parquet"), _table(rng, 1).schema,
                              compression="snappy") as writer:
            for start in range(0, per_file, spec.row_group_rows):
                writer.write_table(_table(rng, min(spec.row_group_rows, per_file - start)))
    _write_manifest(path, wanted)
    return path


def _log(msg: str) -> None:
    print(f"[bench.transforms {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(profile: str, data_dir: str, out_dir: str, runners=None, repeats=None) -> dict:
    spec = SPECS[profile]
    path = ensure_data(os.path.join(data_dir, profile), spec, log=_log)
    files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".parquet"))
    threads = os.cpu_count() or 1
    base = {"workload": "tabular-xform", "path": path, "files": files, "batch_size": BATCH_SIZE,
            "threads": threads, "seed": 7}
    names = [n for n, _ in RUNNERS if not runners or n in runners]
    runs: Dict[str, List[dict]] = {n: [] for n in names}
    # Epochs that ended short (Petastorm 0.13.1's thread pool sometimes stops after zero rows):
    # each such measurement is repeated (bench.suite.measure) and reported.
    short: Dict[str, List[str]] = {n: [] for n in names}
    skip = set()
    for rep in range(repeats or REPEATS[profile]):
        for n in names:
            if n in skip:
                continue
            result = measure({**base, "runner": n}, 900, spec.rows, short[n], log=_log)
            runs[n].append(result)
            if result.get("status") == "ok":
                _log(f"{n:22s} rep {rep}: {result['rows'] / result['wall_s']:>10,.0f} rows/s")
            else:
                _log(f"{n:22s} rep {rep}: {result.get('status')}: {result.get('reason')}")
                skip.add(n)
    labels = dict(RUNNERS)
    from .runners import load

    summary = {}
    for n in names:
        ok = [r for r in runs[n] if r.get("status") == "ok"]
        entry = {"label": labels[n], "config": load(n).config(base)}
        if ok and len(ok) == len(runs[n]):
            rates = [r["rows"] / r["wall_s"] for r in ok]
            entry.update(status="ok", rows_per_s=metrics.median(rates), best_rows_per_s=max(rates),
                         cpu_s_per_mrow=metrics.median(
                             [r["cpu_s"] / r["rows"] * 1e6 for r in ok if r.get("cpu_s")]),
                         peak_rss_mb=max(r.get("peak_rss_bytes", 0) for r in ok) / 1e6)
        else:
            bad = [r for r in runs[n] if r.get("status") != "ok"]
            entry.update(status=bad[0].get("status", "failed") if bad else "failed",
                         reason=bad[0].get("reason") if bad else "no run")
        if short[n]:
            entry["short_epochs"] = short[n]
        summary[n] = entry
    report = {"name": f"transforms-{profile}", "profile": profile,
              "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
              "machine": machine.describe(), "rows": spec.rows, "batch_size": BATCH_SIZE,
              "threads": threads, "results": summary, "raw": runs}
    from .report import write_report

    write_report(report, out_dir, f"transforms-{profile}", markdown(report))
    return report


def markdown(report: dict) -> str:
    res = report["results"]
    lines = [f"# Tabular with transforms ({report['profile']})", "",
             f"Run {report['started']} on {report['threads']} threads. {report['rows']:,} rows "
             f"(200 float32 standardised, 20 strings hashed into 2**20 buckets, `tags` padded to "
             f"{MAX_TAGS}), batches of {report['batch_size']}. Medians of interleaved repeats, "
             "each a fresh process; compare within this run.", "",
             "| system | rows/s (median) | best | CPU s / M rows | peak RSS MB | stoker native ops is |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    ops = res.get("xform_stoker_ops", {})
    for n, s in res.items():
        if s.get("status") != "ok":
            lines.append(f"| {s['label']} | {s.get('status')}: {s.get('reason', '')[:120]} | | | | |")
            continue
        ratio = f"{ops['rows_per_s'] / s['rows_per_s']:.2f}x" if ops.get("status") == "ok" else ""
        lines.append(f"| {s['label']} | {s['rows_per_s']:,.0f} | {s['best_rows_per_s']:,.0f} | "
                     f"{s['cpu_s_per_mrow']:.1f} | {s['peak_rss_mb']:.0f} | {ratio} |")
    plain = res.get("xform_stoker_plain", {})
    peta = res.get("xform_petastorm", {})
    lines.append("")
    for s in res.values():
        if s.get("short_epochs"):
            lines.append(f"- {s['label']}: {len(s['short_epochs'])} measurement(s) ended the epoch "
                         "early and were repeated: " + "; ".join(s["short_epochs"]) + ".")
    if ops.get("status") == "ok" and plain.get("status") == "ok":
        cost = plain["rows_per_s"] / ops["rows_per_s"] - 1
        lines.append(f"- Native ops cost {cost * 100:+.1f}% over the same loader without "
                     "transforms (target <= 10%).")
    if ops.get("status") == "ok" and peta.get("status") == "ok":
        lines.append(f"- stoker native ops = {ops['rows_per_s'] / peta['rows_per_s']:.2f}x "
                     "Petastorm with its TransformSpec (target >= 3x).")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.transforms", description=__doc__)
    parser.add_argument("--profile", choices=sorted(SPECS), default="quick")
    parser.add_argument("--runners", help="comma-separated subset")
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    parser.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    report = run(args.profile, args.data_dir, args.out_dir,
                 args.runners.split(",") if args.runners else None, args.repeats)
    print(markdown(report))
    return 0 if all(s["status"] == "ok" for s in report["results"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
