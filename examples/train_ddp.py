"""Train a small MLP with DistributedDataParallel, fed by stoker, with exact restarts.

Run on one process:            python examples/train_ddp.py --data DIR --ckpt-dir CKPT
Run on 2 processes (CPU/gloo): torchrun --standalone --nproc_per_node=2 examples/train_ddp.py ...

Every --ckpt-every steps each rank saves the model, the optimizer and ``loader.state_dict()``
(a small dict of ints) with ``torch.save``; started again with the same --ckpt-dir, the job
continues from the last checkpoint and ends with the weights an uninterrupted run would have
(single-threaded torch, fixed model seed). The loader's seed defaults to a fresh draw that the
ranks share through the process group; a restart takes it from the checkpoint, and --seed fixes
it (to compare two separate runs).

The dataset needs an int64 ``id`` column, a float ``label`` and feature columns ``f0..f{F-1}``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist

import stoker


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", required=True, help="Parquet file, folder or URI")
    p.add_argument("--features", type=int, default=8, help="feature columns f0..f{N-1}")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--shuffle-window", type=int, default=500)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=None,
                   help="loader seed (default: drawn by rank 0 and shared; kept by checkpoints)")
    p.add_argument("--ckpt-dir", default=None, help="checkpoint folder (resumed from if present)")
    p.add_argument("--ckpt-every", type=int, default=0, help="checkpoint every N steps (0: never)")
    p.add_argument("--out", default=None, help="save the final weights here (rank r: OUT.rank<r>)")
    p.add_argument("--ids-out", default=None, help="write the row ids each rank saw (JSON)")
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds per step (a slow model)")
    return p.parse_args()


def save_atomically(obj, path: str) -> None:
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)  # a kill during the save never leaves a torn checkpoint


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0

    torch.manual_seed(0)  # the same initial weights on every rank and every restart
    model = torch.nn.Sequential(torch.nn.Linear(args.features, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 1))
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    loader = stoker.Loader(args.data, columns=["id", "label"],
                           features=[f"f{i}" for i in range(args.features)],
                           batch_size=args.batch_size, shuffle_window=args.shuffle_window,
                           seed=args.seed, output="torch")  # rank, world size: from torchrun
    step = 0
    ckpt = os.path.join(args.ckpt_dir, f"rank{rank}.pt") if args.ckpt_dir else None
    if ckpt and os.path.exists(ckpt):
        state = torch.load(ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        loader.load_state_dict(state["loader"])
        step = state["step"]
        print(f"rank {rank}: resumed at step {step}, epoch {loader.epoch}", flush=True)

    seen = {}
    # A new iteration after a finished epoch delivers the next epoch (and a resumed loader
    # continues its saved one), so the loop needs no set_epoch.
    while loader.epoch < args.epochs:
        epoch = loader.epoch
        start = time.perf_counter()
        for batch in loader:
            optimizer.zero_grad()
            pred = model(batch["features"]).squeeze(1)
            loss = torch.nn.functional.mse_loss(pred, batch["label"].float())
            loss.backward()
            optimizer.step()
            step += 1
            seen.setdefault(epoch, []).extend(batch["id"].tolist())
            if args.step_sleep:
                time.sleep(args.step_sleep)
            if ckpt and args.ckpt_every and step % args.ckpt_every == 0:
                save_atomically({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                 "loader": loader.state_dict(), "step": step}, ckpt)
            print(f"rank {rank}: step {step}", flush=True)
        stats = loader.stats()
        print(f"rank {rank}: epoch {epoch} done in {time.perf_counter() - start:.2f} s, "
              f"{step} steps, waited for data {100 * stats['stall_fraction']:.0f}% of the loop",
              flush=True)

    if args.out:
        weights = (model.module if distributed else model).state_dict()
        torch.save(weights, f"{args.out}.rank{rank}")
    if args.ids_out:
        with open(f"{args.ids_out}.rank{rank}", "w") as f:
            json.dump({"steps": step, "ids": {str(k): v for k, v in seen.items()}}, f)
    loader.close()
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
