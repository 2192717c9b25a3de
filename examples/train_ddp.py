"""Train a small MLP with DistributedDataParallel, fed by stoker, with exact restarts.

Run on one process:            python examples/train_ddp.py --data DATA --ckpt-dir CKPT
Run on 2 processes (CPU/gloo): torchrun --standalone --nproc_per_node=2 examples/train_ddp.py \\
                                   --data DATA --ckpt-dir CKPT --ckpt-every 100

The data: any Parquet dataset with a numeric label column (--label, default ``label``) and numeric
feature columns (--features: names or globs; default: every other numeric column, except the
--id column and pandas' ``__index_level_N__``). A file written by ``DataFrame.to_parquet`` works as
it is: with --features-dtype auto (the default) float64 features train in float64; choose
``--features-dtype float32 --allow-lossy-cast`` to train in float32 instead.

Every epoch trains on every row once across the ranks: the last batch of a rank may be short, and
the loader evens the ranks out with a few repeated rows that the loss ignores (``padding_mask``);
--drop-last drops the tail instead.

Checkpoints (--ckpt-dir, created if missing): every --ckpt-every steps, after a barrier, rank 0
writes CKPT/checkpoint.pt atomically (a temporary file, fsync, rename) holding the unwrapped
model, the optimizer, ONE ``loader.state_dict()`` and the step. Started again with the same
--ckpt-dir, every rank loads that file, the ranks check that they all resume at the same step
(else they stop with an error naming each rank's step), and the job continues:
- on the same number of ranks it ends with the weights an uninterrupted run would have
  (single-threaded torch, fixed model seed, the loader's seed kept by the checkpoint);
- on another number of ranks (2 -> 1, 2 -> 3, ...) the loader resumes elastically: the rows the
  old ranks had not delivered yet are dealt to the new ranks, each once, with equal steps.
The loader's seed defaults to a fresh draw that the ranks share through the process group; a
restart takes it from the checkpoint, and --seed fixes it (to compare two separate runs).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import stoker

CHECKPOINT = "checkpoint.pt"
FORMAT = 2  # 1: the per-rank rank<r>.pt files of earlier versions of this example (refused)


def say(line: str) -> None:
    """One write per line: the ranks share torchrun's stdout, and print() writes the text and its
    newline separately, so two ranks' lines could run together."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", required=True, help="Parquet file, folder, glob or URI")
    p.add_argument("--label", default="label", help="the label column (default: label)")
    p.add_argument("--features", nargs="+", default=None, metavar="NAME_OR_GLOB",
                   help="feature columns: names or globs such as 'f*' (also comma-separated);\n"
                        "default: every numeric column but --label and --id")
    p.add_argument("--features-dtype", default="auto", choices=["auto", "float32", "float64"],
                   help="dtype of the stacked features and of the model; auto: float32 when\n"
                        "every feature fits it without loss, else float64 (pandas' default)")
    p.add_argument("--allow-lossy-cast", action="store_true",
                   help="allow casts that may lose precision (float64 -> float32)")
    p.add_argument("--id", default="id",
                   help="row id column for --log-ids/--ids-out (read when the dataset has it)")
    p.add_argument("--drop-last", action="store_true",
                   help="drop the rows that fill no batch on every rank (default: pad, masked)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--shuffle-window", type=int, default=500)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=None,
                   help="loader seed (default: drawn by rank 0 and shared; kept by checkpoints)")
    p.add_argument("--ckpt-dir", default=None,
                   help="checkpoint folder (created if missing; resumed from if it holds one)")
    p.add_argument("--ckpt-every", type=int, default=0, help="checkpoint every N steps (0: never)")
    p.add_argument("--out", default=None, help="save the final weights here (rank r: OUT.rank<r>)")
    p.add_argument("--log-ids", default=None, metavar="FILE",
                   help="append one JSON line per step to FILE.rank<r>: step, epoch, the --id\n"
                        "values of the rows trained on (padding excluded)")
    p.add_argument("--ids-out", default=None, help="at the end, write the ids each rank saw (JSON)")
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds per step (a slow model)")
    return p.parse_args()


def resolve_features(args: argparse.Namespace) -> tuple[list[str], str]:
    """The feature columns (in the dataset's column order for globs) and their dtype; clears
    ``args.id`` when the dataset has no such column."""
    columns = stoker.describe(args.data).columns
    names = [c.name for c in columns]
    if args.id not in names:
        args.id = None
    if args.label not in names:
        raise SystemExit(f"--label {args.label!r}: no such column; the columns: {', '.join(names)}")
    excluded = {args.label, args.id}
    candidates = [c.name for c in columns if c.name not in excluded
                  and not c.name.startswith("__index_level_")]
    if args.features is None:
        numeric = {c.name for c in columns if c.ok and c.kind == "dense" and not c.inner_shape
                   and c.dtype.startswith(("bool", "int", "uint", "float"))}
        features = [n for n in candidates if n in numeric]
    else:
        features = []
        patterns = [p for item in args.features for p in item.split(",") if p]
        for pattern in patterns:
            if any(ch in pattern for ch in "*?["):
                matched = [n for n in candidates if fnmatch.fnmatchcase(n, pattern)]
            else:
                matched = [pattern] if pattern in names else []
            if not matched:
                raise SystemExit(f"--features {pattern!r} matches no column; the columns: "
                                 f"{', '.join(names)}")
            features += [n for n in matched if n not in features]
    if not features:
        raise SystemExit("no feature columns: name them with --features")
    dtype = args.features_dtype
    if dtype == "auto":
        described = stoker.describe(args.data, features=features, features_dtype="float32",
                                    allow_lossy_cast=args.allow_lossy_cast).columns
        lossy = [c.name for c in described if c.name in features and not c.ok
                 and c.error_kind == "lossy_cast"]
        dtype = "float64" if lossy else "float32"
    return features, dtype


def load_checkpoint(ckpt_dir: str):
    """CKPT/checkpoint.pt, or None."""
    path = os.path.join(ckpt_dir, CHECKPOINT)
    if os.path.exists(path):
        return torch.load(path, weights_only=True)
    if os.path.exists(os.path.join(ckpt_dir, "rank0.pt")):
        raise SystemExit(f"{ckpt_dir} holds rank<r>.pt checkpoints of an earlier version of this "
                         "example (other loader options, DDP's module. keys); start a new folder")
    return None


def save_atomically(obj, path: str) -> None:
    """A kill during the save never leaves a torn or half-written checkpoint behind."""
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power cut
    finally:
        os.close(dir_fd)


def agree_on_resume(position, world_size: int, distributed: bool) -> None:
    """Every rank must resume at the same step, from the same loader position."""
    if not distributed:
        return
    positions = [None] * world_size
    dist.all_gather_object(positions, position)
    if len(set(positions)) > 1:
        lines = "; ".join(f"rank {r}: " + ("no checkpoint" if p is None else
                                           f"step {p[0]} (epoch {p[1]}, batch {p[2]})")
                          for r, p in enumerate(positions))
        raise SystemExit(f"the ranks found different checkpoints ({lines}): every rank must "
                         "read the same --ckpt-dir (a shared file system), written by one job")


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    world_size = dist.get_world_size() if distributed else 1

    features, dtype = resolve_features(args)
    torch_dtype = getattr(torch, dtype)
    if rank == 0:
        say(f"features ({len(features)}, {dtype}): {', '.join(features)}; label: {args.label}")
    if (args.log_ids or args.ids_out) and args.id is None:
        raise SystemExit("--log-ids/--ids-out need a row id column: name it with --id")
    # The id column is read whenever the dataset has one, logged or not: the loader's options
    # (which its checkpointed state must match) do not depend on the logging flags.
    columns = [args.label] + ([args.id] if args.id else [])
    try:
        loader = stoker.Loader(args.data, columns=columns, features=features,
                               features_dtype=dtype, allow_lossy_cast=args.allow_lossy_cast,
                               batch_size=args.batch_size, shuffle_window=args.shuffle_window,
                               drop_last=args.drop_last, padding_mask=not args.drop_last,
                               seed=args.seed, output="torch")  # rank, world size: from torchrun
    except stoker.errors.LossyCastError as e:
        raise SystemExit(f"{e}\nIn this example: --features-dtype float64 keeps the values, "
                         "--allow-lossy-cast rounds them.") from None

    torch.manual_seed(0)  # the same initial weights on every rank and every restart
    model = torch.nn.Sequential(torch.nn.Linear(len(features), 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 1)).to(torch_dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    step = 0
    if args.ckpt_dir:
        os.makedirs(args.ckpt_dir, exist_ok=True)  # before step 1: a bad path fails now
        state = load_checkpoint(args.ckpt_dir)
        position = None if state is None else (state["step"], state["loader"]["epoch"],
                                               state["loader"]["batch"])
        agree_on_resume(position, world_size, distributed)  # before anything is loaded
        if state is not None:
            saved = state.get("features")
            if saved is not None and saved != features:
                raise SystemExit(f"the checkpoint in {args.ckpt_dir} was trained on features "
                                 f"{saved}, not {features}")
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            loader.load_state_dict(state["loader"])  # another world size: elastic resume
            step = state["step"]
            say(f"rank {rank}: resumed at step {step}, epoch {loader.epoch} (saved on "
                f"{state['loader']['world_size']} ranks, now {world_size})")
    # DDP wraps the model after the load: its state_dict keys stay those of the plain model.
    ddp = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
    log = open(f"{args.log_ids}.rank{rank}", "a") if args.log_ids else None

    seen = {}
    # A new iteration after a finished epoch delivers the next epoch (and a resumed loader
    # continues its saved one), so the loop needs no set_epoch.
    while loader.epoch < args.epochs:
        epoch = loader.epoch
        start = time.perf_counter()
        for batch in loader:
            optimizer.zero_grad()
            pred = ddp(batch["features"]).squeeze(1)
            err = (pred - batch[args.label].to(torch_dtype)) ** 2
            if args.drop_last:
                loss = err.mean()
            else:  # padding rows (repeated to even the ranks out) do not count
                real = ~batch["__padding__"]
                loss = (err * real).sum() / real.sum().clamp(min=1)
            loss.backward()
            optimizer.step()
            step += 1
            if log or args.ids_out:  # (args.id is set: checked at start-up)
                ids = batch[args.id]
                if not args.drop_last:
                    ids = ids[~batch["__padding__"]]
                ids = ids.tolist()
                seen.setdefault(epoch, []).extend(ids)
                if log:
                    log.write(json.dumps({"step": step, "epoch": epoch, "ids": ids}) + "\n")
                    log.flush()
            if args.step_sleep:
                time.sleep(args.step_sleep)
            if args.ckpt_dir and args.ckpt_every and step % args.ckpt_every == 0:
                if distributed:
                    dist.barrier()  # every rank has finished this step
                if rank == 0:  # the ranks are in lockstep: rank 0's loader state is theirs too
                    save_atomically({"format": FORMAT, "model": model.state_dict(),
                                     "optimizer": optimizer.state_dict(),
                                     "loader": loader.state_dict(), "step": step,
                                     "features": features},
                                    os.path.join(args.ckpt_dir, CHECKPOINT))
            say(f"rank {rank}: step {step}")
        stats = loader.stats()
        say(f"rank {rank}: epoch {epoch} done in {time.perf_counter() - start:.2f} s, "
            f"{step} steps, waited for data {100 * stats['stall_fraction']:.0f}% of the loop")

    if args.out:
        torch.save(model.state_dict(), f"{args.out}.rank{rank}")
    if args.ids_out:
        with open(f"{args.ids_out}.rank{rank}", "w") as f:
            json.dump({"steps": step, "ids": {str(k): v for k, v in seen.items()}}, f)
    if log:
        log.close()
    loader.close()
    if distributed:
        # The DDP wrapper holds the process group too: dropped first, the group's last reference
        # goes in destroy_process_group(), which frees it without the GIL. Freed when main()
        # returns instead, gloo's destructor waits for its worker thread while holding the GIL,
        # and that thread can need the GIL to free its last finished work: a PyTorch deadlock
        # at exit (pytorch/pytorch#56297) that hung 3-rank runs here under load.
        del ddp
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
