"""Train under Ray Train's TorchTrainer, fed by stoker, with checkpoints Ray restores exactly.

    python examples/ray_train.py --data DATA --storage /tmp/ray-results --workers 2

(a local Ray with at least --workers CPUs; --address auto or HOST:PORT joins a running cluster)

Inside ``train_loop`` a ``stoker.Loader`` is made with no rank or world size: Ray Train's torch
backend has started the process group, and the Loader takes both from it (as under torchrun).
Every --ckpt-every steps rank 0 reports a Ray checkpoint holding the model, the optimizer, the step
and ONE ``loader.state_dict()`` (the ranks are in lockstep: its state is every rank's). When Ray
restores the run (a worker died and ``FailureConfig(max_failures=...)`` allows a retry, or the run
is started again with the same name and storage), or a new run starts from a saved checkpoint
(--resume),, every worker loads that checkpoint and the
loader continues the exact order; on another number of workers it resumes elastically (the rows
not delivered yet are dealt to the new ranks, each once).

The data: a Parquet dataset with a numeric ``label`` column and numeric features (--features,
default every other numeric column but --id). --log-ids writes one JSON line per step and rank
(what the test compares with an uninterrupted run); --die-at makes rank 1 exit at that step on the
first attempt (to show the restore).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

CHECKPOINT = "checkpoint.pt"


def train_loop(config: dict) -> None:
    import ray.train
    import torch

    import stoker

    torch.manual_seed(0)
    torch.set_num_threads(1)
    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    loader = stoker.Loader(config["data"], columns=[config["label"], config["id"]],
                           features=config["features"], batch_size=config["batch_size"],
                           seed=config["seed"], output="torch", num_threads=1)
    saved = loader.state_dict()
    assert (saved["rank"], saved["world_size"]) == (rank, world_size), (saved, rank, world_size)
    model = torch.nn.Linear(len(config["features"]), 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    # Ray's own restore (a retry after a failure, or the same run name again) comes first; else
    # --resume: a checkpoint of another run (Ray Train 2 has no resume_from_checkpoint).
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None and config.get("resume"):
        checkpoint = ray.train.Checkpoint.from_directory(config["resume"])
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            state = torch.load(os.path.join(folder, CHECKPOINT), weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        loader.load_state_dict(state["loader"])  # another world size: elastic resume
        step = state["step"]
    ddp = ray.train.torch.prepare_model(model)
    log = open(f"{config['log_ids']}.rank{rank}", "a") if config.get("log_ids") else None
    attempt_marker = os.path.join(config["storage"], "died-once")
    while loader.epoch < config["epochs"]:
        epoch = loader.epoch
        for batch in loader:
            optimizer.zero_grad()
            loss = ((ddp(batch["features"]).squeeze(1) - batch[config["label"]].float()) ** 2).mean()
            loss.backward()
            optimizer.step()
            step += 1
            if log:
                log.write(json.dumps({"step": step, "epoch": epoch,
                                      "ids": batch[config["id"]].tolist()}) + "\n")
                log.flush()
            if config["ckpt_every"] and step % config["ckpt_every"] == 0:
                with tempfile.TemporaryDirectory() as folder:
                    ray_checkpoint = None
                    if rank == 0:
                        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                    "loader": loader.state_dict(), "step": step},
                                   os.path.join(folder, CHECKPOINT))
                        ray_checkpoint = ray.train.Checkpoint.from_directory(folder)
                    ray.train.report({"step": step, "loss": float(loss)}, checkpoint=ray_checkpoint)
            if (rank == 1 and step == config.get("die_at") and
                    not os.path.exists(attempt_marker)):
                open(attempt_marker, "w").close()
                # Ray's controller collects reports by polling the workers: give it time to
                # register the last checkpoint (a report lost with its worker means the restore
                # starts from the one before, which resumes exactly too).
                time.sleep(3)
                os._exit(1)  # a worker lost mid-epoch: Ray restarts the group from a checkpoint
    if log:
        log.close()
    loader.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--storage", required=True, help="Ray Train's storage_path (checkpoints)")
    p.add_argument("--name", default="stoker-ray-train")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--label", default="label")
    p.add_argument("--id", default="id")
    p.add_argument("--features", nargs="+", required=True)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ckpt-every", type=int, default=5)
    p.add_argument("--max-failures", type=int, default=1)
    p.add_argument("--die-at", type=int, default=None)
    p.add_argument("--resume", default=None, help="a Ray checkpoint folder to start from")
    p.add_argument("--log-ids", default=None)
    p.add_argument("--address", default="local",
                   help="'local' starts a Ray here; 'auto' or HOST:PORT joins a cluster")
    args = p.parse_args()

    import ray
    import ray.train
    from ray.train.torch import TorchTrainer

    if args.address == "local":
        ray.init(num_cpus=max(2, args.workers), include_dashboard=False, log_to_driver=True)
    else:
        ray.init(address=args.address, log_to_driver=True)
    config = {"data": os.path.abspath(args.data), "label": args.label, "id": args.id,
              "features": args.features, "epochs": args.epochs, "batch_size": args.batch_size,
              "seed": args.seed, "ckpt_every": args.ckpt_every, "die_at": args.die_at,
              "log_ids": args.log_ids, "storage": os.path.abspath(args.storage),
              "resume": os.path.abspath(args.resume) if args.resume else None}
    trainer = TorchTrainer(
        train_loop, train_loop_config=config,
        scaling_config=ray.train.ScalingConfig(num_workers=args.workers, use_gpu=False),
        run_config=ray.train.RunConfig(
            name=args.name, storage_path=os.path.abspath(args.storage),
            failure_config=ray.train.FailureConfig(max_failures=args.max_failures)))
    result = trainer.fit()
    print(json.dumps({"checkpoint": result.checkpoint.path if result.checkpoint else None}))


if __name__ == "__main__":
    main()
