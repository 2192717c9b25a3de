"""``python -m bench.study``: the study's end-to-end table, several epochs of a training loop.

The published Petastorm study measured whole training runs: E epochs of a loop whose step is
shorter than the loader's time per batch, so the loader decides the run's length, and the share of
the time the accelerator works ("accelerator busy") shows how starved it is. This reproduces that
measurement on tabular-wide (snappy): each system runs E epochs (default 3) in one fresh process;
each step sleeps ``--step-ms`` (a sleep releases the GIL, like waiting on an accelerator).

Systems:

- ``petastorm_default``: make_batch_reader + BatchedDataLoader with Petastorm's defaults, a new
  reader per epoch (bench/runners/petastorm_default.py).
- ``petastorm_study``: the study's settings: thread pool, ``convert_early_to_numpy=True``, a seed,
  and its local-disk cache (``cache_type='local-disk'``, ``cleanup=False`` so the cache outlives each
  epoch's reader; the default deletes it when the reader stops).
- ``torch_dataloader``: the hand-written DataLoader + pyarrow runner, reseeded per epoch.
- ``stoker`` and ``stoker_cache``: one stoker.Loader iterated E times, without and with
  ``cache_dir`` (an empty folder at the start of the run: epoch 1 fills it).

Writes bench/results/study-<profile>.{json,md,png}.

``--remote``: the same systems and loop on the remote workload (bench/remote.py): tabular-wide
served by ``rclone serve s3`` through the emulated link (default 200 Mbit/s, 20 ms RTT; a network
namespace with ``tc tbf`` when root, else the delaying proxy's token bucket). The quick profile
uses bench.remote's default dataset (96k rows, ~117 MB of objects), smoke its smoke dataset. Every
system reads ``s3://`` through the link; both caches (Petastorm's local-disk one, stoker's
cache_dir) live on local disk and start empty. Writes bench/results/study-remote-<profile>.*.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

from .generators import SPECS, dataset_facts, ensure_tabular
from .runners.common import all_tabular_columns
from .jobs import run_job
from .suite import ATTEMPTS, HERE

SYSTEMS = (
    ("petastorm_default", "Petastorm (defaults)"),
    ("petastorm_study", "Petastorm (study's settings + local-disk cache)"),
    ("torch_dataloader", "PyTorch DataLoader + pyarrow"),
    ("stoker", "stoker (no cache)"),
    ("stoker_cache", "stoker (cache_dir)"),
)
BATCH_SIZE = 4096


# ----------------------------------------------------------------------------------- worker

def _study_kwargs(job: dict, epoch: int) -> dict:
    from .runners import petastorm_fixed

    kwargs = petastorm_fixed._kwargs({**job, "seed": job["seed"] + epoch})
    kwargs.update(cache_type="local-disk", cache_location=job["cache_dir"],
                  cache_size_limit=20 << 30, cache_row_size_estimate=job["row_bytes"],
                  cache_extra_settings={"cleanup": False})
    return kwargs


def _remote_parquet_files(job: dict) -> None:
    """The DataLoader runner opens paths with pq.ParquetFile: make "s3://" paths open through
    pyarrow's S3FileSystem (created in each DataLoader worker, after the fork: the AWS SDK is
    not fork-safe)."""
    import pyarrow.parquet as pq

    from .remote_worker import stoker_storage_options

    original = pq.ParquetFile
    opts = {k: v for k, v in stoker_storage_options(job).items()}
    state = {}

    def parquet_file(source, *args, **kwargs):
        if isinstance(source, str) and source.startswith("s3://"):
            import pyarrow.fs as pafs

            if state.get("pid") != os.getpid():
                state["fs"], state["pid"] = pafs.S3FileSystem(**opts), os.getpid()
            source = state["fs"].open_input_file(source[len("s3://"):])
        return original(source, *args, **kwargs)

    pq.ParquetFile = parquet_file


def _epoch_batches(job: dict, epoch: int):
    """A fresh iterator over one epoch's batches for the peers (their reader per epoch)."""
    from .runners import _petastorm_common, torch_dataloader

    system = job["system"]
    if job.get("uri"):
        from .remote_worker import petastorm_reader_batches

        if system == "petastorm_default":
            return petastorm_reader_batches(job, {})
        if system == "petastorm_study":
            return petastorm_reader_batches(job, _study_kwargs(job, epoch))
        if system == "torch_dataloader":
            files = [job["uri"].rstrip("/") + "/" + f for f in job["files"]]
            return torch_dataloader.batches({**job, "files": files, "seed": job["seed"] + epoch})
    if system == "petastorm_default":
        return _petastorm_common.batches(job, {}, {})
    if system == "petastorm_study":
        return _petastorm_common.batches(job, _study_kwargs(job, epoch), {})
    if system == "torch_dataloader":
        return torch_dataloader.batches({**job, "seed": job["seed"] + epoch})
    raise ValueError(system)


def worker(job: dict) -> dict:
    import numpy  # noqa: F401  (libraries load before the clock starts)
    import pyarrow.parquet  # noqa: F401
    import torch  # noqa: F401

    step_s = job["step_ms"] / 1e3
    epochs, rows, firsts, steps = [], [], [], 0
    started = time.perf_counter()
    if job["system"].startswith("stoker"):
        import stoker

        from .runners import stoker as stoker_runner

        opts = stoker_runner._options(job)
        if job["system"] == "stoker_cache":
            opts["cache_dir"] = job["cache_dir"]
        if job.get("uri"):
            from .remote_worker import stoker_storage_options

            opts["storage_options"] = stoker_storage_options(job)
        loader = stoker.Loader(job.get("uri") or job["path"], **opts)

        def one_epoch(_):
            for batch in loader:
                yield len(batch["label"]), batch
    else:
        if job["system"].startswith("petastorm"):
            from .runners import _petastorm_compat

            _petastorm_compat.apply()
        if job.get("uri") and job["system"] == "torch_dataloader":
            _remote_parquet_files(job)
        one_epoch = lambda epoch: _epoch_batches(job, epoch)  # noqa: E731
    for epoch in range(job["epochs"]):
        t0 = time.perf_counter()
        n = 0
        for count, _batch in one_epoch(epoch):
            if n == 0:
                firsts.append(time.perf_counter() - t0)
            n += count
            steps += 1
            time.sleep(step_s)  # the accelerator's step: the GIL is released meanwhile
        epochs.append(time.perf_counter() - t0)
        rows.append(n)
    total = time.perf_counter() - started
    return {"status": "ok", "epoch_s": epochs, "rows": rows, "steps": steps, "total_s": total,
            "busy": steps * step_s / total, "first_batch_s": firsts}


# ----------------------------------------------------------------------------------- driver

def run(profile: str, epochs: int, step_ms: float, data_dir: str, out_dir: str,
        systems=None, remote: dict | None = None) -> dict:
    link = None
    if remote is not None:
        from . import remote as remote_bench

        remote_profile = "smoke" if profile == "smoke" else "default"
        root = os.path.join(os.path.abspath(data_dir), f"remote-{remote_profile}")
        path = ensure_tabular(root, remote_bench.PROFILES[remote_profile], "snappy")
    else:
        path = ensure_tabular(os.path.join(data_dir, profile), SPECS[profile]["tabular"], "snappy")
    facts = dataset_facts(path, all_tabular_columns())
    work = tempfile.mkdtemp(prefix="stoker-study-")
    report = {"profile": profile, "epochs": epochs, "step_ms": step_ms, "batch_size": BATCH_SIZE,
              "rows": facts["rows"], "threads": os.cpu_count() or 1,
              "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "systems": {}}
    extra = {}
    try:
        if remote is not None:
            link = remote_bench.Link(root, remote["rate_mbit"], remote["rtt_ms"],
                                     remote["emulation"], work).start()
            object_bytes = sum(os.path.getsize(f) for f in facts["files"])
            report["remote"] = {"emulation": link.emulation, "rate_mbit": remote["rate_mbit"],
                                "rtt_ms": remote["rtt_ms"], "notes": link.notes,
                                "object_bytes": object_bytes}
            extra = {"uri": f"s3://{remote_bench.BUCKET}/",
                     "files": [os.path.basename(f) for f in facts["files"]],
                     "storage": {"endpoint": link.endpoint, "access_key": remote_bench.ACCESS_KEY,
                                 "secret_key": remote_bench.SECRET_KEY}}
        for name, label in SYSTEMS:
            if systems and name not in systems:
                continue
            cache = os.path.join(work, name)
            job = {"system": name, "workload": "tabular-snappy", "path": path,
                   "files": facts["files"], "batch_size": BATCH_SIZE,
                   "threads": report["threads"], "seed": 7, "epochs": epochs,
                   "step_ms": step_ms, "cache_dir": cache,
                   "row_bytes": facts["uncompressed_bytes"] // max(facts["rows"], 1), **extra}
            # Petastorm 0.13.1 sometimes ends an epoch early (bench/README.md): a run with a
            # short epoch is repeated (with an empty cache), up to ATTEMPTS runs, and reported
            # as such.
            for attempt in range(ATTEMPTS):
                shutil.rmtree(cache, ignore_errors=True)
                os.makedirs(cache)
                before = link.bytes_down() if link else 0
                # The job goes through stdin: it may hold storage credentials, and a command
                # line is readable by every user of the machine.
                result = run_job(job, "bench.study", "--worker", timeout=1800, stdin=True,
                                 env={"PYTHONWARNINGS": "ignore"})
                if link:
                    result["link_bytes"] = link.bytes_down() - before
                result["label"] = label
                if result.get("status") != "ok" or all(r == facts["rows"] for r in result["rows"]):
                    break
                result["short_epochs"] = [i for i, r in enumerate(result["rows"])
                                          if r != facts["rows"]]
                result["attempts"] = attempt + 1
            report["systems"][name] = result
            if result.get("status") == "ok":
                print(f"{label:48s} total {result['total_s']:7.1f} s  busy {result['busy']:.2f}  "
                      "epochs " + " ".join(f"{e:.1f}" for e in result["epoch_s"]), flush=True)
            else:
                print(f"{label:48s} {result.get('status')}: {result.get('reason')}", flush=True)
            shutil.rmtree(cache, ignore_errors=True)
    finally:
        if link:
            link.stop()
        shutil.rmtree(work, ignore_errors=True)
    if remote is not None:
        from .report import redacted

        report = redacted(report, [remote_bench.SECRET_KEY])
    from .report import write_report

    stem = write_report(report, out_dir, f"study-remote-{profile}" if remote else f"study-{profile}",
                        markdown(report))
    chart(report, stem + ".png")
    return report


def markdown(report: dict) -> str:
    systems = report["systems"]
    remote = report.get("remote")
    where = ""
    if remote:
        where = (f" Read from S3 (rclone serve s3) through an emulated {remote['rate_mbit']:g} "
                 f"Mbit/s link with {remote['rtt_ms']:g} ms RTT ({remote['emulation']}; "
                 f"{remote['object_bytes'] / 1e6:.0f} MB of objects); caches on local disk, "
                 "empty at the start.")
    lines = [f"# The study's table{' (remote)' if remote else ''}: {report['epochs']} epochs end "
             f"to end ({report['profile']})", "",
             f"Run {report['started']}. tabular-wide (snappy), {report['rows']:,} rows, batches of "
             f"{report['batch_size']}, {report['threads']} threads; each step sleeps "
             f"{report['step_ms']:g} ms (the accelerator). One fresh process per system; compare "
             "within this run." + where, "",
             "| system | total s | per epoch s | first batch s (epoch 1) | accelerator busy | "
             + ("MB through the link | " if remote else "") + "stoker (cache_dir) is |",
             "| --- | ---: | --- | ---: | ---: | " + ("---: | " if remote else "") + "---: |"]
    best = systems.get("stoker_cache", {})
    for name, s in systems.items():
        if s.get("status") != "ok":
            lines.append(f"| {s['label']} | {s.get('status')}: {str(s.get('reason'))[:100]} | | | | |"
                         + (" |" if remote else ""))
            continue
        ratio = f"{s['total_s'] / best['total_s']:.1f}x" if best.get("status") == "ok" else ""
        short = f" (short epochs: {s['short_epochs']})" if s.get("short_epochs") else ""
        first = s.get("first_batch_s") or []
        link = f" {s.get('link_bytes', 0) / 1e6:.0f} |" if remote else ""
        first_s = f"{first[0]:.2f}" if first else "-"
        lines.append(f"| {s['label']}{short} | {s['total_s']:.1f} | "
                     + " / ".join(f"{e:.1f}" for e in s["epoch_s"])
                     + f" | {first_s} | {s['busy'] * 100:.0f}% |{link} {ratio} |")
    lines += ["", "First batch: seconds from the start of epoch 1's loop to its first batch (Petastorm's "
              "reader and the DataLoader are created inside the loop, the stoker Loader just before "
              "it: its construction counts in the total only)."]
    if remote:
        lines.append("MB through the link: bytes the server sent over the emulated link during the "
                     "system's whole run (all epochs), counted at the proxy.")
    return "\n".join(lines) + "\n"


def chart(report: dict, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, s in report["systems"].items():
        if s.get("status") == "ok":
            ax.plot(range(1, len(s["epoch_s"]) + 1), s["epoch_s"], marker="o", label=s["label"])
    ax.set_xlabel("epoch")
    ax.set_ylabel("epoch time, s")
    ax.set_yscale("log")
    where = (f", S3 over {report['remote']['rate_mbit']:g} Mbit/s" if report.get("remote") else "")
    ax.set_title(f"{report['epochs']} epochs end to end, {report['step_ms']:g} ms step{where}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.study", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=sorted(SPECS), default="quick")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--step-ms", type=float, default=2.0)
    parser.add_argument("--systems", help="comma-separated subset")
    parser.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    parser.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    parser.add_argument("--remote", action="store_true",
                        help="the remote workload: S3 through the emulated link (bench/remote.py)")
    parser.add_argument("--rate-mbit", type=float, default=200.0)
    parser.add_argument("--rtt-ms", type=float, default=20.0)
    parser.add_argument("--emulation", choices=("auto", "netns", "proxy"), default="auto")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        try:
            result = worker(json.loads(sys.stdin.read() if args.worker == "-" else args.worker))
        except Exception as error:  # noqa: BLE001
            result = {"status": "failed", "reason": f"{type(error).__name__}: {error}"}
        print("@@RESULT@@" + json.dumps(result), flush=True)
        os._exit(0)  # peers leave non-daemon threads behind
    remote = (dict(rate_mbit=args.rate_mbit, rtt_ms=args.rtt_ms, emulation=args.emulation)
              if args.remote else None)
    report = run(args.profile, args.epochs, args.step_ms, args.data_dir, args.out_dir,
                 args.systems.split(",") if args.systems else None, remote)
    print(markdown(report))
    return 0 if all(s.get("status") == "ok" for s in report["systems"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
