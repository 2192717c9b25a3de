"""Preprocess on Ray actors, train in this process: stoker.ray.RayLoader, checked against a Loader.

    python examples/ray_preprocess.py --data DATA --image image --actors 2 --epochs 2 --check

Starts a local Ray (or joins a cluster: --address auto), opens a ``stoker.ray.RayLoader`` with
--actors actors, each running stoker's engine with --threads threads on its share of the batches
(batch i from actor i % N), and iterates --epochs epochs as a training loop would, printing rows/s,
the time the loop waited for Ray's hand-off, and each actor's node. With --image the column is
decoded, randomly cropped to --crop pixels and flipped by the actors. --check also runs a local
``stoker.Loader`` with the same options and compares every batch, byte for byte. --resume-at K
saves the state after K batches of the first epoch, and resumes it in a new RayLoader with one
actor (the same batches follow).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def batch_bytes(batch: dict) -> bytes:
    """Every array of a batch, keys in order (Ragged columns as values, then offsets)."""
    import stoker

    out = b""
    for key in sorted(batch):
        value = batch[key]
        out += key.encode()
        if isinstance(value, stoker.Ragged):
            out += np.asarray(value.flat_values).tobytes()
            out += b"".join(np.asarray(o).tobytes() for o in value.nested_offsets)
        else:
            out += np.asarray(value).tobytes()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="Parquet file or folder (or URL)")
    parser.add_argument("--address", default="local",
                        help="'local' starts a Ray here; 'auto' or HOST:PORT joins a cluster")
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="engine threads per actor")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--image", default=None, help="a JPEG/PNG/WebP column to decode")
    parser.add_argument("--crop", type=int, default=64)
    parser.add_argument("--check", action="store_true", help="compare with a local Loader")
    parser.add_argument("--resume-at", type=int, default=None)
    args = parser.parse_args()

    import ray

    import stoker
    import stoker.ray
    from stoker import ops

    ray.init(address=args.address, include_dashboard=False, logging_level="ERROR")
    options = dict(batch_size=args.batch_size, seed=args.seed, num_threads=args.threads)
    if args.image:
        options["transforms"] = {args.image: [ops.decode_image(),
                                              ops.random_crop([args.crop, args.crop]),
                                              ops.horizontal_flip()]}
    expected = []
    if args.check:
        with stoker.Loader(args.data, **options) as local:
            expected = [[batch_bytes(b) for b in local] for _ in range(args.epochs)]

    state, seen = None, []
    with stoker.ray.RayLoader(args.data, num_actors=args.actors,
                              actor_options={"num_cpus": args.threads}, **options) as loader:
        print(f"{len(loader)} batches per epoch, {args.actors} actors, seed {loader.seed}")
        for epoch in range(args.epochs):
            started, rows, got = time.perf_counter(), 0, []
            for i, batch in enumerate(loader):
                rows += len(next(iter(batch.values())))
                got.append(batch_bytes(batch))
                if epoch == 0 and args.resume_at is not None and i + 1 == args.resume_at:
                    state = loader.state_dict()
            seconds = time.perf_counter() - started
            stats = loader.stats()
            print(f"epoch {epoch}: {rows / seconds:,.0f} rows/s"
                  f"{' (with starting the actors)' if epoch == 0 else ''}, waited "
                  f"{stats['wait_ms']:.0f} ms in ray.get so far, replacements "
                  f"{stats['replacements']}")
            seen.append(got)
            if args.check:
                same = got == expected[epoch]
                print(f"epoch {epoch}: every batch equal to the local Loader's: {same}")
                if not same:
                    raise SystemExit(1)
        for slot, actor in enumerate(loader.stats()["actors"]):
            print(f"actor {slot}: node {actor['node_id'][:12]}, {actor['batches']} batches, "
                  f"{actor['wait_ms']:.0f} ms waited")
    if state is not None:
        with stoker.ray.RayLoader(args.data, num_actors=1, **options) as one:
            one.load_state_dict(state)
            rest = [batch_bytes(b) for b in one]
        same = rest == seen[0][args.resume_at:]
        print(f"resumed at batch {args.resume_at} on 1 actor: the same batches follow: {same}")
        if not same:
            raise SystemExit(1)
    ray.shutdown()


if __name__ == "__main__":
    main()
