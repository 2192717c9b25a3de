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
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from .generators import SPECS, dataset_facts, ensure_tabular
from .runners.common import all_tabular_columns
from .suite import HERE, REPO

SYSTEMS = (
    ("petastorm_default", "Petastorm (defaults)"),
    ("petastorm_study", "Petastorm (study's settings + local-disk cache)"),
    ("torch_dataloader", "PyTorch DataLoader + pyarrow"),
    ("stoker", "stoker (no cache)"),
    ("stoker_cache", "stoker (cache_dir)"),
)
BATCH_SIZE = 4096


# ----------------------------------------------------------------------------------- worker

def _epoch_batches(job: dict, epoch: int):
    """A fresh iterator over one epoch's batches for the peers (their reader per epoch)."""
    from .runners import _petastorm_common, petastorm_fixed, torch_dataloader

    system = job["system"]
    if system == "petastorm_default":
        return _petastorm_common.batches(job, {}, {})
    if system == "petastorm_study":
        kwargs = petastorm_fixed._kwargs({**job, "seed": job["seed"] + epoch})
        kwargs.update(cache_type="local-disk", cache_location=job["cache_dir"],
                      cache_size_limit=20 << 30, cache_row_size_estimate=job["row_bytes"],
                      cache_extra_settings={"cleanup": False})
        return _petastorm_common.batches(job, kwargs, {})
    if system == "torch_dataloader":
        return torch_dataloader.batches({**job, "seed": job["seed"] + epoch})
    raise ValueError(system)


def worker(job: dict) -> dict:
    import numpy  # noqa: F401  (libraries load before the clock starts)
    import pyarrow.parquet  # noqa: F401
    import torch  # noqa: F401

    step_s = job["step_ms"] / 1e3
    epochs, rows, steps = [], [], 0
    started = time.perf_counter()
    if job["system"].startswith("stoker"):
        import stoker

        from .runners import stoker as stoker_runner

        opts = stoker_runner._options(job)
        if job["system"] == "stoker_cache":
            opts["cache_dir"] = job["cache_dir"]
        loader = stoker.Loader(job["path"], **opts)

        def one_epoch(_):
            for batch in loader:
                yield len(batch["label"]), batch
    else:
        if job["system"].startswith("petastorm"):
            from .runners import _petastorm_compat

            _petastorm_compat.apply()
        one_epoch = lambda epoch: _epoch_batches(job, epoch)  # noqa: E731
    for epoch in range(job["epochs"]):
        t0 = time.perf_counter()
        n = 0
        for count, _batch in one_epoch(epoch):
            n += count
            steps += 1
            time.sleep(step_s)  # the accelerator's step: the GIL is released meanwhile
        epochs.append(time.perf_counter() - t0)
        rows.append(n)
    total = time.perf_counter() - started
    return {"status": "ok", "epoch_s": epochs, "rows": rows, "steps": steps, "total_s": total,
            "busy": steps * step_s / total}


# ----------------------------------------------------------------------------------- driver

def _run(job: dict, timeout: float) -> dict:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONWARNINGS="ignore")
    try:
        proc = subprocess.run([sys.executable, "-m", "bench.study", "--worker", json.dumps(job)],
                              capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "reason": f"timed out after {timeout:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("@@RESULT@@"):
            return json.loads(line[len("@@RESULT@@"):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"status": "failed", "reason": f"exit {proc.returncode}: " + " | ".join(tail)[-500:]}


def run(profile: str, epochs: int, step_ms: float, data_dir: str, out_dir: str,
        systems=None) -> dict:
    path = ensure_tabular(os.path.join(data_dir, profile), SPECS[profile]["tabular"], "snappy")
    facts = dataset_facts(path, all_tabular_columns())
    work = tempfile.mkdtemp(prefix="stoker-study-")
    report = {"profile": profile, "epochs": epochs, "step_ms": step_ms, "batch_size": BATCH_SIZE,
              "rows": facts["rows"], "threads": os.cpu_count() or 1,
              "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "systems": {}}
    try:
        for name, label in SYSTEMS:
            if systems and name not in systems:
                continue
            cache = os.path.join(work, name)
            job = {"system": name, "workload": "tabular-snappy", "path": path,
                   "files": facts["files"], "batch_size": BATCH_SIZE,
                   "threads": report["threads"], "seed": 7, "epochs": epochs,
                   "step_ms": step_ms, "cache_dir": cache,
                   "row_bytes": facts["uncompressed_bytes"] // max(facts["rows"], 1)}
            # Petastorm 0.13.1 sometimes ends an epoch early (bench/README.md): a run with a
            # short epoch is repeated (with an empty cache) up to twice and reported as such.
            for attempt in range(3):
                shutil.rmtree(cache, ignore_errors=True)
                os.makedirs(cache)
                result = _run(job, timeout=1800)
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
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.join(out_dir, f"study-{profile}")
    with open(stem + ".json", "w") as f:
        json.dump(report, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(markdown(report))
    chart(report, stem + ".png")
    return report


def markdown(report: dict) -> str:
    systems = report["systems"]
    lines = [f"# The study's table: {report['epochs']} epochs end to end ({report['profile']})", "",
             f"Run {report['started']}. tabular-wide (snappy), {report['rows']:,} rows, batches of "
             f"{report['batch_size']}, {report['threads']} threads; each step sleeps "
             f"{report['step_ms']:g} ms (the accelerator). One fresh process per system; compare "
             "within this run.", "",
             "| system | total s | per epoch s | accelerator busy | stoker (cache_dir) is |",
             "| --- | ---: | --- | ---: | ---: |"]
    best = systems.get("stoker_cache", {})
    for name, s in systems.items():
        if s.get("status") != "ok":
            lines.append(f"| {s['label']} | {s.get('status')}: {str(s.get('reason'))[:100]} | | | |")
            continue
        ratio = f"{s['total_s'] / best['total_s']:.1f}x" if best.get("status") == "ok" else ""
        short = f" (short epochs: {s['short_epochs']})" if s.get("short_epochs") else ""
        lines.append(f"| {s['label']}{short} | {s['total_s']:.1f} | "
                     + " / ".join(f"{e:.1f}" for e in s["epoch_s"])
                     + f" | {s['busy'] * 100:.0f}% | {ratio} |")
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
    ax.set_title(f"{report['epochs']} epochs end to end, {report['step_ms']:g} ms step")
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
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        try:
            result = worker(json.loads(args.worker))
        except Exception as error:  # noqa: BLE001
            result = {"status": "failed", "reason": f"{type(error).__name__}: {error}"}
        print("@@RESULT@@" + json.dumps(result), flush=True)
        os._exit(0)  # peers leave non-daemon threads behind
    report = run(args.profile, args.epochs, args.step_ms, args.data_dir, args.out_dir,
                 args.systems.split(",") if args.systems else None)
    print(markdown(report))
    return 0 if all(s.get("status") == "ok" for s in report["systems"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
