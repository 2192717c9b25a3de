"""One rank of the DDP training benchmark (started by ``python -m bench.training`` via torchrun).

Each rank trains an MLP on the stacked features of its own half of tabular-wide, fed by one of
the bench runners (stoker, Petastorm with the study's fixes, the DataLoader runner), for a fixed
number of steps (the same on every rank, so no collective waits). A step is the MLP's forward and
backward plus a sleep that releases the GIL, standing in for an accelerator. The rank times every
wait for the next batch: the stall fraction is that time over the loop's wall time.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runner", required=True)
    p.add_argument("--root", required=True, help="folder with one sub-folder per rank")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--step-ms", type=float, default=20.0)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    path = os.path.join(args.root, f"rank{rank}")
    files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".parquet"))
    job = {"path": path, "files": files, "workload": "tabular-snappy", "threads": 1,
           "batch_size": args.batch_size, "seed": 1, "shuffle": True}
    runner = importlib.import_module(f"bench.runners.{args.runner}")
    problem = runner.available()  # also applies the runners' compatibility shims
    if problem:
        raise SystemExit(f"{args.runner}: {problem}")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(220, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batches = runner.batches(job)
    restarts = 0

    def next_batch():
        # Petastorm's reader sometimes ends an epoch early (the suite sees it deliver 0 rows and
        # repeats the measurement): start the runner's epoch again, and count it.
        nonlocal batches, restarts
        for _ in range(3):
            try:
                return next(batches)
            except StopIteration:
                restarts += 1
                batches = runner.batches(job)
        raise RuntimeError(f"{args.runner} ended its epoch early three times")

    dist.barrier()
    start = time.perf_counter()
    wait = 0.0
    for _ in range(args.steps):
        t = time.perf_counter()
        _, batch = next_batch()
        wait += time.perf_counter() - t
        features = torch.as_tensor(batch["features"], dtype=torch.float32)
        label = torch.as_tensor(batch["label"]).float()
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(features).squeeze(1), label)
        loss.backward()
        optimizer.step()
        time.sleep(args.step_ms / 1000)
    wall = time.perf_counter() - start
    results = [None] * world
    dist.all_gather_object(results, {"rank": rank, "wall_s": wall, "wait_s": wait,
                                     "restarts": restarts})
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(results, f)
    batches.close()
    del model  # before the group: see examples/train_ddp.py (a gloo deadlock at exit)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
