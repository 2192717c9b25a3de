"""``python -m bench.training``: the DDP example's stall meter, stoker vs the peers.

Two ranks (torchrun, gloo, one worker thread each on a 2-core machine) train the same MLP for the
same number of steps, each rank reading its own half of tabular-wide (files dealt round-robin),
fed by stoker, by Petastorm with the study's fixes, and by the DataLoader runner. Reported per
system: steps/s (total over ranks) and the stall fraction (time waiting for the next batch over
the loop's wall time, the larger of the two ranks). Writes bench/results/training.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from .generators import SPECS, ensure_tabular
from .suite import ATTEMPTS, HERE

RUNNERS = (("stoker", "stoker"), ("petastorm_fixed", "Petastorm (study's fixes)"),
           ("torch_dataloader", "PyTorch DataLoader + pyarrow"))


def _split(path: str, root: str) -> int:
    """Rank folders of symlinks: rank r gets files r, r+2, ...; returns rows per rank."""
    import pyarrow.parquet as pq

    files = sorted(f for f in os.listdir(path) if f.endswith(".parquet"))
    rows = []
    for rank in range(2):
        folder = os.path.join(root, f"rank{rank}")
        os.makedirs(folder, exist_ok=True)
        n = 0
        for name in files[rank::2]:
            link, target = os.path.join(folder, name), os.path.join(path, name)
            if os.path.lexists(link) and os.readlink(link) != target:
                os.remove(link)  # left by a run on other data (or a dangling one)
            if not os.path.lexists(link):
                os.symlink(target, link)
            n += pq.ParquetFile(link).metadata.num_rows
        rows.append(n)
    return min(rows)


def run(profile: str, data_dir: str, out_dir: str, step_ms: float, batch_size: int,
        max_steps: int) -> dict:
    path = ensure_tabular(os.path.join(data_dir, profile), SPECS[profile]["tabular"], "snappy")
    split_root = os.path.join(data_dir, profile, "training-split")
    rows = _split(path, split_root)
    steps = min(max_steps, rows // batch_size)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE) + os.pathsep +
               os.environ.get("PYTHONPATH", ""))
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(key, None)
    report = {"profile": profile, "steps_per_rank": steps, "batch_size": batch_size,
              "step_ms": step_ms, "ranks": 2, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                                        time.gmtime()),
              "systems": {}}
    for name, label in RUNNERS:
        out = os.path.join(split_root, f"{name}.json")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=2", "-m", "bench.train_worker", "--runner", name, "--root",
               split_root, "--steps", str(steps), "--batch-size", str(batch_size),
               "--step-ms", str(step_ms), "--out", out]
        # A peer's run that fails (Petastorm's thread pool under load) is repeated, as the suite
        # repeats short epochs; every failed attempt is reported.
        failures = []
        for _ in range(ATTEMPTS):
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800,
                                  cwd=os.path.dirname(HERE))
            if proc.returncode == 0:
                break
            # The rank's own traceback, not only torchrun's summary after it.
            tracebacks = [line for line in proc.stderr.splitlines() if line.startswith("[rank")]
            failures.append("\n".join(tracebacks[-30:]) or proc.stderr[-1500:])
            print(f"{label}: failed (attempt {len(failures)} of {ATTEMPTS})\n{failures[-1]}",
                  flush=True)
        if proc.returncode != 0:
            report["systems"][name] = {"label": label, "status": "failed", "error": failures[-1],
                                       "failed_attempts": failures}
            continue
        ranks = json.load(open(out))
        wall = max(r["wall_s"] for r in ranks)
        stall = max(r["wait_s"] / r["wall_s"] for r in ranks)
        report["systems"][name] = {"label": label, "status": "ok", "wall_s": wall,
                                   "steps_per_s": 2 * steps / wall, "stall_fraction": stall,
                                   "early_ends": sum(r.get("restarts", 0) for r in ranks),
                                   "failed_attempts": failures}
        print(f"{label:32s} {2 * steps / wall:8.1f} steps/s  stall {stall:.2f}", flush=True)
    from .report import write_report

    write_report(report, out_dir, f"training-{profile}", markdown(report))
    return report


def markdown(report: dict) -> str:
    lines = [f"# DDP training fed by each loader ({report['profile']})", "",
             f"Run {report['started']}. 2 ranks (torchrun, gloo), {report['steps_per_rank']} "
             f"steps per rank of {report['batch_size']} rows, an MLP 220-256-1 plus a "
             f"{report['step_ms']:.0f} ms sleep per step standing in for the accelerator; each "
             "rank reads its own half of tabular-wide (snappy) with one worker thread. Stall "
             "fraction: time waiting for the next batch over the loop's wall time (the larger "
             "of the two ranks). One run each on a shared 2-core machine: compare within this "
             "run.", "",
             "| system | steps/s | stoker is | stall fraction |", "| --- | ---: | ---: | ---: |"]
    base = report["systems"].get("stoker", {})
    for name, s in report["systems"].items():
        if s["status"] != "ok":
            lines.append(f"| {s['label']} | failed | | |")
            continue
        ratio = (f"{base['steps_per_s'] / s['steps_per_s']:.2f}x" if base.get("status") == "ok"
                 else "")
        early = f" (its epoch ended early {s['early_ends']}x and was restarted)" \
            if s.get("early_ends") else ""
        lines.append(f"| {s['label']}{early} | {s['steps_per_s']:.1f} | {ratio} | "
                     f"{s['stall_fraction']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.training", description=__doc__)
    parser.add_argument("--profile", choices=sorted(SPECS), default="quick")
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    parser.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    report = run(args.profile, args.data_dir, args.out_dir, args.step_ms, args.batch_size,
                 args.max_steps)
    return 0 if all(s["status"] == "ok" for s in report["systems"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
