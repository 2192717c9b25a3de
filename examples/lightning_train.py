"""A LightningDataModule whose train_dataloader() returns a stoker Loader.

    python examples/lightning_train.py --data DIR --devices 2 --epochs 2 --out OUT

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

import lightning as L
import torch

import stoker


class StokerData(L.LightningDataModule):
    def __init__(self, path: str, features: int, batch_size: int, seed: int) -> None:
        super().__init__()
        self.path, self.features, self.batch_size, self.seed = path, features, batch_size, seed

    def train_dataloader(self):
        # Created after the process group exists: rank and world size come from it.
        loader = stoker.Loader(self.path, columns=["id", "label"],
                               features=[f"f{i}" for i in range(self.features)],
                               batch_size=self.batch_size, shuffle_window=500, seed=self.seed,
                               output="torch")
        # The epoch Lightning is about to run: the number it gives samplers' set_epoch (after a
        # checkpoint saved at an epoch's end, current_epoch still names the finished epoch).
        loader.set_epoch(self.trainer.fit_loop.epoch_progress.current.processed)
        return loader


class Regressor(L.LightningModule):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(features, 16), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 1))
        self.seen = {}

    def training_step(self, batch, batch_idx):
        self.seen.setdefault(self.current_epoch, []).extend(batch["id"].tolist())
        pred = self.net(batch["features"]).squeeze(1)
        return torch.nn.functional.mse_loss(pred, batch["label"].float())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data", required=True)
    p.add_argument("--features", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--ckpt-dir", default=None, help="save a checkpoint at every epoch's end")
    p.add_argument("--every-n-steps", type=int, default=0, help="also every N steps (mid-epoch)")
    p.add_argument("--resume", default=None, help="a Lightning checkpoint to resume from")
    p.add_argument("--out", required=True, help="row ids seen per rank and epoch (JSON prefix)")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Regressor(args.features)
    callbacks = []
    if args.ckpt_dir:
        callbacks.append(L.pytorch.callbacks.ModelCheckpoint(dirpath=args.ckpt_dir, save_top_k=-1,
                                                             every_n_epochs=1))
    if args.ckpt_dir and args.every_n_steps:
        callbacks.append(L.pytorch.callbacks.ModelCheckpoint(
            dirpath=args.ckpt_dir, save_top_k=-1, every_n_train_steps=args.every_n_steps,
            filename="{step}"))
    trainer = L.Trainer(accelerator="cpu", devices=args.devices,
                        strategy="ddp" if args.devices > 1 else "auto", max_epochs=args.epochs,
                        callbacks=callbacks, enable_progress_bar=False, logger=False,
                        enable_checkpointing=bool(args.ckpt_dir), enable_model_summary=False)
    trainer.fit(model, datamodule=StokerData(args.data, args.features, args.batch_size, args.seed),
                ckpt_path=args.resume)
    with open(f"{args.out}.rank{trainer.global_rank}", "w") as f:
        json.dump({str(k): v for k, v in model.seen.items()}, f)


if __name__ == "__main__":
    os.environ.setdefault("PL_DISABLE_FORK", "1")
    main()
