"""A LightningDataModule whose train_dataloader() returns a stoker Loader.

    python examples/lightning_train.py --data DIR --devices 2 --epochs 2 --ckpt-dir CKPT

The data, as for examples/train_ddp.py: a numeric --label column and --features (names or globs;
default every other numeric column), stacked as --features-dtype (auto: float64 when the columns
are float64, as pandas writes them; the model then trains in float64). Every row trains once per
epoch: ranks are evened out by a few padding rows that the loss ignores.

Lightning's loop iterates the loader once per epoch (the loader advances its epoch by itself),
DDP on CPU (gloo) runs one process per device, and Lightning's checkpoints carry the loader's
state (`state_dict`/`load_state_dict`, the protocol of torchdata's StatefulDataLoader), so
`--resume CKPT` continues the data where the checkpoint left it.

Two rules make restarts exact with Lightning:
- Give `seed=`: Lightning restores a loader's state only from a mid-epoch checkpoint, so after an
  end-of-epoch checkpoint the seed must come from the program.
- In `train_dataloader()`, `set_epoch(trainer.fit_loop.epoch_progress.current.processed)` (the
  epoch Lightning passes to samplers): Lightning calls it after restoring its counters and before
  the first `iter()`; a mid-epoch state restored afterwards wins.
  (Never call `set_epoch` in `on_train_epoch_start`: Lightning has already started the
  iteration then, and `set_epoch` ends it.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import lightning as L
import torch

import stoker

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_ddp import resolve_features  # noqa: E402  (--label/--features/--features-dtype)


class StokerData(L.LightningDataModule):
    def __init__(self, args: argparse.Namespace, features: list, dtype: str) -> None:
        super().__init__()
        self.args, self.features, self.dtype = args, features, dtype

    def train_dataloader(self):
        # Created after the process group exists: rank and world size come from it.
        a = self.args
        loader = stoker.Loader(a.data, columns=[a.label] + ([a.id] if a.id else []),
                               features=self.features,
                               features_dtype=self.dtype, allow_lossy_cast=a.allow_lossy_cast,
                               batch_size=a.batch_size, shuffle_window=a.shuffle_window,
                               drop_last=False, padding_mask=True, seed=a.seed, output="torch")
        # The epoch Lightning is about to run: the number it gives samplers' set_epoch (after a
        # checkpoint saved at an epoch's end, current_epoch still names the finished epoch).
        loader.set_epoch(self.trainer.fit_loop.epoch_progress.current.processed)
        return loader


class Regressor(L.LightningModule):
    def __init__(self, features: int, label: str, id_column: str, log_ids=None,
                 step_sleep: float = 0.0) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(features, 16), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 1))
        self.label, self.id_column, self.step_sleep = label, id_column, step_sleep
        self.log_ids, self.log_file = log_ids, None
        self.seen = {}

    def training_step(self, batch, batch_idx):
        real = ~batch["__padding__"]  # rows repeated to even the ranks out do not count
        ids = batch[self.id_column][real].tolist() if self.id_column else []
        self.seen.setdefault(self.current_epoch, []).extend(ids)
        if self.log_ids:
            if self.log_file is None:
                self.log_file = open(f"{self.log_ids}.rank{self.global_rank}", "a")
            self.log_file.write(json.dumps({"step": self.global_step + 1, "epoch": self.current_epoch,
                                       "ids": ids}) + "\n")
            self.log_file.flush()
        pred = self.net(batch["features"]).squeeze(1)
        err = (pred - batch[self.label].to(pred.dtype)) ** 2
        return (err * real).sum() / real.sum().clamp(min=1)

    def on_train_batch_end(self, outputs, batch, batch_idx):
        if self.step_sleep:
            time.sleep(self.step_sleep)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data", required=True)
    p.add_argument("--label", default="label")
    p.add_argument("--features", nargs="+", default=None, metavar="NAME_OR_GLOB")
    p.add_argument("--features-dtype", default="auto", choices=["auto", "float32", "float64"])
    p.add_argument("--allow-lossy-cast", action="store_true")
    p.add_argument("--id", default="id", help="row id column (logged per rank)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--shuffle-window", type=int, default=500)
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--ckpt-dir", default=None, help="save a checkpoint at every epoch's end")
    p.add_argument("--every-n-steps", type=int, default=0, help="also every N steps (mid-epoch)")
    p.add_argument("--resume", default=None,
                   help="a Lightning checkpoint to resume from, or 'last' (CKPT/last.ckpt)")
    p.add_argument("--out", default=None, help="row ids seen per rank and epoch (JSON prefix)")
    p.add_argument("--log-ids", default=None, metavar="FILE",
                   help="append one JSON line per step to FILE.rank<r>: step, epoch, row ids")
    p.add_argument("--weights", default=None, help="save the final weights here (rank r: .rank<r>)")
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds per step (a slow model)")
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    features, dtype = resolve_features(args)
    torch.manual_seed(0)
    # In the features' dtype from the start: Lightning restores a checkpoint's weights before its
    # precision plugin converts the module, so a float32 module would round float64 weights.
    model = Regressor(len(features), args.label, args.id, args.log_ids,
                      args.step_sleep).to(getattr(torch, dtype))
    callbacks = []
    if args.ckpt_dir:
        callbacks.append(L.pytorch.callbacks.ModelCheckpoint(dirpath=args.ckpt_dir, save_top_k=-1,
                                                             every_n_epochs=1))
    if args.ckpt_dir and args.every_n_steps:
        callbacks.append(L.pytorch.callbacks.ModelCheckpoint(
            dirpath=args.ckpt_dir, save_top_k=-1, every_n_train_steps=args.every_n_steps,
            filename="{step}", save_last=True))
    trainer = L.Trainer(accelerator="cpu", devices=args.devices,
                        precision="64-true" if dtype == "float64" else "32-true",
                        strategy="ddp" if args.devices > 1 else "auto", max_epochs=args.epochs,
                        callbacks=callbacks, enable_progress_bar=False, logger=False,
                        enable_checkpointing=bool(args.ckpt_dir), enable_model_summary=False)
    trainer.fit(model, datamodule=StokerData(args, features, dtype), ckpt_path=args.resume)
    if args.out:
        with open(f"{args.out}.rank{trainer.global_rank}", "w") as f:
            json.dump({str(k): v for k, v in model.seen.items()}, f)
    if args.weights:
        torch.save(model.net.state_dict(), f"{args.weights}.rank{trainer.global_rank}")


if __name__ == "__main__":
    os.environ.setdefault("PL_DISABLE_FORK", "1")
    main()
