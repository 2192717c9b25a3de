"""``python -m bench.ray_scaleout``: image preprocessing in the trainer or on Ray actors.

The images workload (bench/generators.py: 500x375 JPEG q90), decoded and augmented with the
chain of the image bench plus a normalisation: decode, random-resized-crop 224, horizontal flip,
normalise to float32 with the ImageNet mean and std (``--no-normalise``: uint8), CHW. The
training process is limited to ONE core (every thread of it pinned with ``sched_setaffinity``)
and consumes each batch by reading every byte once (a CRC-32 of the batch: the stand-in for the
host-to-device copy, and the digest the byte-equality check compares), then an optional fixed
step (``--step-ms``, a sleep, like waiting on an accelerator; default none). Configurations,
each ``--epochs`` epochs (default 2) in a fresh process, in one run:

- ``local``: ``stoker.Loader(num_threads=1)`` in the trainer, on the trainer's core;
- ``ray_1`` / ``ray_2``: ``stoker.ray.RayLoader`` with 1 and 2 actors on a local Ray
  (``ray.init(num_cpus=2)``: the actors share the machine's 2 cores with the trainer); their
  batches must be byte-identical to ``local``'s;
- ``ray_data``: Ray Data's own pipeline: ``read_parquet`` + ``map_batches`` (Pillow decode, the
  same crop/flip rule and normalisation in numpy) + ``iter_torch_batches``;
- ``handoff``: the object-store hand-off alone, on a ``ray.cluster_utils.Cluster`` of two
  simulated nodes: an actor returns a pre-made numpy batch of 1 MB, 10 MB and the image batch's
  size; ``ray.get`` timed in the trainer, from an actor on the trainer's node and on the other one.

Reported per configuration: rows/s (from constructing the loader to its last batch, and steady:
from the first batch to the last), CPU seconds per row of the trainer, of the Ray worker processes
(actors, Ray Data's tasks) and of Ray's own daemons (raylet, GCS), and the RayLoader's stats().
Then the projection model of docs/scaling.md ("Ray loader: what to expect"):

    trainer rows/s = min(N x per-actor rows/s, batch rows / hand-off s per batch,
                         link bytes/s / bytes per row)

with the per-actor rate and CPU per row from ``ray_1`` and the hand-off cost from ``handoff``;
its prediction for 2 actors is printed next to the measurement (on this machine with the cores
the actors actually have as a fourth term), and its projection for 8 and 32 actors.

Writes bench/results/ray-scaleout.{json,md} (``--profile quick``) or ray-scaleout-<profile>.*.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import zlib
from typing import Any, Dict, List, Optional

from .generators import SPECS, dataset_facts, ensure_images
from .jobs import run_job
from .suite import HERE, WORKER_ENV as SUITE_WORKER_ENV

PROFILES = {
    "smoke": {"batch_size": 16, "epochs": 2, "repeats": 1, "handoff_calls": 5, "timeout": 150},
    "quick": {"batch_size": 64, "epochs": 2, "repeats": 1, "handoff_calls": 20, "timeout": 240},
}
CONFIGS = ("local", "ray_1", "ray_2", "ray_data")
LABELS = {"local": "stoker.Loader, num_threads=1, in the trainer (1 core)",
          "ray_1": "stoker.ray.RayLoader, 1 actor",
          "ray_2": "stoker.ray.RayLoader, 2 actors",
          "ray_data": "Ray Data read_parquet + map_batches (Pillow) + iter_torch_batches"}
SEED = 7
HANDOFF_STORE_MB = 256
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
IMAGE_SIZE = 224
MB = 1 << 20


# ------------------------------------------------------------------------------ the worker

def _pin_process(cores) -> None:
    """Every thread of this process on `cores` (sched_setaffinity(0) pins the calling thread
    only; threads created later inherit it)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:  # a thread that has just exited
            pass


def stoker_options(job: dict) -> dict:
    from stoker import ops

    return dict(columns=["image", "label"], batch_size=job["batch_size"], shuffle=True,
                seed=SEED, drop_last=False, rank=0, world_size=1,
                transforms={"image": [ops.decode_image(), ops.random_resized_crop(IMAGE_SIZE),
                                      ops.horizontal_flip(),
                                      *([ops.normalize(MEAN, STD)] if job["normalise"] else []),
                                      ops.to_chw()]})


def _as_numpy(x):
    import numpy as np

    if hasattr(x, "numpy"):  # a torch tensor
        x = x.numpy()
    return np.ascontiguousarray(x)


def _consume(batch) -> tuple:
    """Reads every byte of the batch once: (rows, CRC-32 of image then label bytes, bytes)."""
    image, label = _as_numpy(batch["image"]), _as_numpy(batch["label"])
    crc = zlib.crc32(memoryview(label).cast("B"), zlib.crc32(memoryview(image).cast("B")))
    return len(label), crc, image.nbytes + label.nbytes


class _ProcessCpu:
    """CPU seconds of this process, of the Ray worker processes (actors, Ray Data's tasks) and of
    Ray's daemons (raylet, GCS, ...), all descendants of this process (Ray started here)."""

    def __init__(self) -> None:
        import psutil

        self._me = psutil.Process()

    def sample(self) -> Dict[str, float]:
        import psutil

        out = {"trainer": sum(self._me.cpu_times()[:2]), "ray_workers": 0.0, "ray_daemons": 0.0}
        for child in self._me.children(recursive=True):
            try:
                cpu = sum(child.cpu_times()[:2])
                cmd = " ".join(child.cmdline())
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            worker = ("default_worker.py" in cmd or cmd.startswith("ray::")) and \
                not cmd.startswith(("ray::DashboardAgent", "ray::RuntimeEnvAgent"))
            out["ray_workers" if worker else "ray_daemons"] += cpu
        return out

    @staticmethod
    def machine() -> float:
        """Busy CPU seconds of the whole machine (every process, other jobs' too)."""
        import psutil

        t = psutil.cpu_times()
        return sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - \
            getattr(t, "guest_nice", 0.0)


def _ray_init(job: dict) -> None:
    import ray

    # address="local": a new cluster even where another (a stale ray_current_cluster) exists.
    ray.init(address="local", num_cpus=job["ray_cpus"], include_dashboard=False,
             log_to_driver=False,
             object_store_memory=job["object_store_mb"] * MB, configure_logging=False)


def _ray_data_batches(job: dict):
    import random

    import numpy as np
    import ray

    from .runners.common import decode_transform, normalise

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False

    def transform(batch: Dict[str, Any]) -> Dict[str, Any]:
        labels = np.asarray(batch["label"], dtype=np.int64)
        rng = random.Random(int(labels.sum()) * 1000003 + len(labels))
        images = np.stack([decode_transform(bytes(b), rng) for b in batch["image"]])
        return {"image": normalise(images) if job["normalise"] else images, "label": labels}

    ds = ray.data.read_parquet(job["path"], columns=["image", "label"])
    return ds.map_batches(transform, batch_size=job["batch_size"], batch_format="numpy")


def _epoch(job: dict) -> dict:
    """``job["epochs"]`` epochs of one configuration in this (fresh) process: the first with
    the start-up, the others the steady state."""
    import numpy  # noqa: F401  (libraries load before the clock starts)
    import torch  # noqa: F401

    import stoker

    config = job["config"]
    if config != "local":
        import ray
        import ray.data  # noqa: F401

        _ray_init(job)
    _pin_process({job["trainer_core"]})
    cpu = _ProcessCpu()
    step_s = job["step_ms"] / 1e3
    loader = dataset = None
    cpu0, machine0 = cpu.sample(), cpu.machine()
    start = time.perf_counter()
    if config == "local":
        loader = stoker.Loader(job["path"], num_threads=1, **stoker_options(job))
    elif config != "ray_data":
        from stoker.ray import RayLoader

        # One engine thread per actor, one CPU each: the per-actor rate is one core's.
        loader = RayLoader(job["path"], num_actors=int(config.split("_")[1]),
                           actor_options={"num_cpus": 1}, num_threads=1, **stoker_options(job))
    else:
        dataset = _ray_data_batches(job)
    nbytes = 0
    crcs: List[int] = []
    epochs: List[dict] = []
    first_s = None
    cpu_steady = None
    for epoch in range(job["epochs"]):
        if epoch == 1:
            cpu_steady, machine_steady = cpu.sample(), cpu.machine()
        batches = iter(loader) if dataset is None else \
            dataset.iter_torch_batches(batch_size=job["batch_size"])
        rows = 0
        for batch in batches:
            n, crc, size = _consume(batch)
            if first_s is None:
                first_s = time.perf_counter() - start
            rows += n
            nbytes += size
            crcs.append(crc)
            if step_s:
                time.sleep(step_s)
        epochs.append({"rows": rows, "end_s": time.perf_counter() - start})
    wall = time.perf_counter() - start
    cpu1, machine1 = cpu.sample(), cpu.machine()
    # Cores other jobs kept busy (the machine's busy time less this run's processes'): on a
    # shared machine, what the actors could not have.
    others = (machine1 - machine0 - sum(cpu1.values()) + sum(cpu0.values())) / wall
    if cpu_steady is not None:
        others_steady = (machine1 - machine_steady - sum(cpu1.values()) +
                         sum(cpu_steady.values())) / (wall - epochs[0]["end_s"])
    else:
        others_steady = others
    stats = None
    if loader is not None:
        try:
            stats = _jsonable(loader.stats(actors=True) if config != "local" else loader.stats())
        except Exception as error:  # noqa: BLE001 - stats are informative, not the measurement
            stats = {"error": f"{type(error).__name__}: {error}"}
        loader.close()
    steady_rows = sum(e["rows"] for e in epochs[1:])
    steady_s = wall - epochs[0]["end_s"]
    out = {"status": "ok", "rows": epochs[0]["rows"], "epoch_rows": [e["rows"] for e in epochs],
           "epoch_end_s": [e["end_s"] for e in epochs], "batches": len(crcs) // len(epochs),
           "bytes": nbytes // len(epochs), "wall_s": wall, "first_batch_s": first_s,
           "rows_per_s": epochs[0]["rows"] / epochs[0]["end_s"],
           "steady_rows_per_s": steady_rows / steady_s if steady_rows and steady_s > 0 else None,
           "cpu_s": {k: cpu1[k] - cpu0[k] for k in cpu1},
           "steady_cpu_s": {k: cpu1[k] - cpu_steady[k] for k in cpu1} if cpu_steady else None,
           "steady_rows": steady_rows, "crcs": crcs, "stats": stats,
           "trainer_affinity": sorted(os.sched_getaffinity(0)),
           "engine_strided": engine_strided(), "others_cores": max(others, 0.0),
           "steady_others_cores": max(others_steady, 0.0)}
    if config != "local":
        import ray

        ray.shutdown()
    return out


def engine_strided() -> bool:
    """Whether the engine runs one stride of the batches (start_epoch(epoch, start, step)); an
    engine without it makes each RayLoader actor decode EVERY batch and discard the others'."""
    from stoker import _stoker

    doc = (_stoker.Engine.start_epoch.__doc__ or "").split("\n")[0]
    return doc.count(",") >= 3  # self, epoch, start_batch, step


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "_asdict"):
        return _jsonable(value._asdict())
    if hasattr(value, "__dict__"):
        return _jsonable(vars(value))
    return repr(value)


def _median(values: List[float]) -> float:
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def _handoff(job: dict) -> dict:
    """ray.get of a pre-made numpy batch returned by an actor, on the trainer's node and on a
    second simulated node, timed in the trainer (pinned to one core like the configurations)."""
    import numpy as np
    import ray
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # A small store, touched once whole before timing (below): a long-running loader's store has
    # its pages mapped; a fresh one faults each page in on first use (~0.1-1 ms per MB here).
    store = HANDOFF_STORE_MB * MB
    node_args = {"num_cpus": 1, "object_store_memory": store}
    cluster = Cluster(initialize_head=True, head_node_args=node_args)
    cluster.add_node(**node_args, resources={"other_node": 1})
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    _pin_process({job["trainer_core"]})

    @ray.remote(num_cpus=0)
    class Producer:
        def __init__(self):
            self._arrays = {}

        def batch(self, nbytes: int):
            if nbytes not in self._arrays:
                self._arrays[nbytes] = np.ones(nbytes, dtype=np.uint8)
            return self._arrays[nbytes]

    head = ray.get_runtime_context().get_node_id()
    actors = {"same_node": Producer.options(
                  scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False)).remote(),
              "other_node": Producer.options(resources={"other_node": 1}).remote()}
    sizes = {"8 B": 8, "1 MB": MB, "10 MB": 10 * MB, "batch": job["batch_bytes"]}
    calls = job["handoff_calls"]
    out: Dict[str, Any] = {"status": "ok", "calls": calls, "sizes": sizes, "where": {}}
    chunk = 32 * MB
    for actor in actors.values():  # each node's store, and the head's for the other's transfers
        for _ in range(2 * store // chunk):
            ray.get(actor.batch.remote(chunk))
    for where, actor in actors.items():
        per_size = {}
        for label, nbytes in sizes.items():
            for _ in range(2):  # warm: the actor makes its array, the store maps its pages
                ray.get(actor.batch.remote(nbytes))
            round_trip, get_ready, submit = [], [], []
            for _ in range(calls):
                t = time.perf_counter()
                value = ray.get(actor.batch.remote(nbytes))
                round_trip.append(time.perf_counter() - t)
                del value
                t = time.perf_counter()
                ref = actor.batch.remote(nbytes)
                submit.append(time.perf_counter() - t)
                ray.wait([ref], fetch_local=False)
                t = time.perf_counter()
                value = ray.get(ref)
                get_ready.append(time.perf_counter() - t)
                assert value.nbytes == nbytes
                del value, ref
            # Two in flight, like a loader's pipeline: the hand-off rate one actor sustains.
            t = time.perf_counter()
            pending = [actor.batch.remote(nbytes) for _ in range(2)]
            for _ in range(calls):
                value = ray.get(pending.pop(0))
                pending.append(actor.batch.remote(nbytes))
                del value
            ray.get(pending)
            pipelined = (time.perf_counter() - t) / calls
            per_size[label] = {"bytes": nbytes, "round_trip_ms": _median(round_trip) * 1e3,
                               "get_ready_ms": _median(get_ready) * 1e3,
                               "submit_ms": _median(submit) * 1e3,
                               "pipelined_ms": pipelined * 1e3}
        out["where"][where] = per_size
    ray.shutdown()
    cluster.shutdown()
    return out


def worker_main(job: dict) -> None:
    try:
        result = _handoff(job) if job["config"] == "handoff" else _epoch(job)
    except ImportError as error:
        result = {"status": "unavailable", "reason": f"{type(error).__name__}: {error}"}
    except Exception as error:  # noqa: BLE001 - reported, not fatal to the run
        import traceback

        result = {"status": "failed", "reason": f"{type(error).__name__}: {error}",
                  "traceback": traceback.format_exc()[-3000:]}
    print("@@RESULT@@" + json.dumps(result), flush=True)
    sys.stdout.flush()
    os._exit(0)  # Ray's and the loaders' threads are not waited for


# ------------------------------------------------------------------------------ the driver

# The worker's environment (set unless the caller's environment sets them): the suite's runners'
# (Ray's logs, auth and usage stats, offline Hugging Face, no warnings), and
WORKER_ENV = {
    **SUITE_WORKER_ENV,
    "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
    # No idle workers started with the cluster: on 2 cores they compete with the start-up
    # (actors and Ray Data's tasks start their own worker processes, counted in rows/s).
    "RAY_prestart_worker_first_driver": "0",
    "RAY_enable_worker_prestart": "0",
}


def _log(msg: str) -> None:
    print(f"[ray-scaleout {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _summarise(runs: List[dict], expected_rows: int) -> dict:
    ok = [r for r in runs if r["status"] == "ok"]
    if not ok:
        return {"status": runs[0]["status"], "reason": runs[0].get("reason"),
                **({"traceback": runs[0]["traceback"]} if "traceback" in runs[0] else {})}
    full = [r for r in ok if all(n == expected_rows for n in r["epoch_rows"])]
    best = full or ok
    rates = [r["rows_per_s"] for r in best]
    pick = sorted(best, key=lambda r: r["rows_per_s"])[len(best) // 2]  # the median run
    all_rows = sum(pick["epoch_rows"])
    steady_rows = pick["steady_rows"] or all_rows
    steady_cpu = pick["steady_cpu_s"] or pick["cpu_s"]
    return {"status": "ok" if full else "short", "rows": pick["rows"],
            "epoch_rows": pick["epoch_rows"], "epoch_end_s": pick["epoch_end_s"],
            "batches": pick["batches"], "bytes": pick["bytes"],
            "bytes_per_row": pick["bytes"] / max(pick["rows"], 1),
            "rows_per_s": _median(rates),
            "steady_rows": steady_rows,
            "steady_rows_per_s": pick["steady_rows_per_s"], "first_batch_s": pick["first_batch_s"],
            "wall_s": pick["wall_s"],
            "cpu_s": pick["cpu_s"],
            "cpu_ms_per_row": {k: v / max(all_rows, 1) * 1e3 for k, v in pick["cpu_s"].items()},
            "steady_cpu_ms_per_row": {k: v / max(steady_rows, 1) * 1e3
                                      for k, v in steady_cpu.items()},
            "crcs": pick["crcs"], "stats": pick["stats"], "runs": len(runs),
            "trainer_affinity": pick["trainer_affinity"],
            "engine_strided": pick["engine_strided"],
            "others_cores": pick.get("others_cores"),
            "steady_others_cores": pick.get("steady_others_cores")}


def model(configs: dict, handoff: dict, cores: int, link_gbit: float,
          actors: List[int]) -> Optional[dict]:
    """The projection of docs/scaling.md from the 1-actor run and the hand-off measurement.

    For N actors on CPU nodes (each on its own core): min(N x per-actor rows/s, the trainer's
    hand-off bound, the measured cross-node transfer bound, the link bound). For N actors on
    this machine: min(N x per-actor rows/s, the hand-off bound, the rows/s the cores left by
    the trainer and Ray's daemons can decode)."""
    one = configs.get("ray_1", {})
    if one.get("status") != "ok" or handoff.get("status") != "ok":
        return None
    batch_rows = one["rows"] / max(one["batches"], 1)
    bytes_per_row = one["bytes_per_row"]
    per_actor = one["steady_rows_per_s"] or one["rows_per_s"]
    # The trainer's share of the hand-off: submitting the call for a later batch and ray.get of
    # a batch already in its node's store (the actor's copy into the store is part of the
    # actor's time per batch, so of per_actor).
    same = handoff["where"]["same_node"]["batch"]
    other = handoff["where"]["other_node"]["batch"]
    handoff_ms = same["submit_ms"] + same["get_ready_ms"]
    handoff_bound = batch_rows / (handoff_ms / 1e3) if handoff_ms > 0 else float("inf")
    # Across nodes ray.get of a finished batch includes Ray's transfer to the trainer's node
    # (here over loopback, one batch at a time: a conservative bound, transfers can overlap).
    slopes = {w: handoff_slopes(v) for w, v in handoff["where"].items()}
    transfer_ms = other["get_ready_ms"]
    transfer_bound = batch_rows / (transfer_ms / 1e3) if transfer_ms > 0 else float("inf")
    link_bound = link_gbit * 1e9 / 8 / bytes_per_row
    # Cores: on this machine the actors share `cores` with the trainer and Ray's daemons (their
    # core time per second measured with 1 actor is not the actors'). Each row costs actor CPU,
    # N times over with an engine without the strided mode (every actor decodes every batch).
    actor_cpu_per_row = one["steady_cpu_ms_per_row"]["ray_workers"] / 1e3
    trainer_cpu_per_row = one["steady_cpu_ms_per_row"]["trainer"] / 1e3
    daemon_cpu_per_row = one["steady_cpu_ms_per_row"]["ray_daemons"] / 1e3
    strided = bool(one.get("engine_strided"))
    read = read_share(one.get("stats"))
    rows = []
    for n in actors:
        # Each actor reads (and Parquet-decodes) every row and assembles 1/N of the batches
        # (with the transform ops): Amdahl's law over the 1-actor time per row. Without the
        # strided engine each actor assembles every batch too.
        share = read + (1 - read) / n if strided else 1.0
        nodes = {"actors": per_actor / share, "hand-off": handoff_bound,
                 "transfer": transfer_bound, "link": link_bound}
        # This machine: the cores other jobs left (measured during the N-actor run, else the
        # 1-actor run) over the CPU per row delivered: trainer, Ray's daemons, all actors.
        run = configs.get(f"ray_{n}", {})
        run = run if run.get("status") == "ok" else one
        free = max(cores - (run.get("steady_others_cores") or 0.0), 0.0)
        work = trainer_cpu_per_row + daemon_cpu_per_row + actor_cpu_per_row * share * n
        here = {"actors": per_actor / share, "hand-off": handoff_bound,
                "cores": free / work if work > 0 else float("inf")}
        entry = {"actors": n, "terms": nodes, "free_cores": free,
                 "binding": min(nodes, key=nodes.get),
                 "predicted_rows_per_s": min(nodes.values()), "terms_here": here,
                 "binding_here": min(here, key=here.get),
                 "predicted_here_rows_per_s": min(here.values())}
        measured = configs.get(f"ray_{n}", {})
        if measured.get("status") == "ok":
            entry["measured_steady_rows_per_s"] = measured["steady_rows_per_s"]
            entry["measured_rows_per_s"] = measured["rows_per_s"]
            entry["measured_over_predicted_here"] = (measured["steady_rows_per_s"] or 0) / \
                entry["predicted_here_rows_per_s"]
        rows.append(entry)
    return {"per_actor_rows_per_s": per_actor, "batch_rows": batch_rows,
            "bytes_per_row": bytes_per_row, "handoff_ms_per_batch": handoff_ms,
            "handoff_bound_rows_per_s": handoff_bound, "transfer_ms_per_batch": transfer_ms,
            "transfer_bound_rows_per_s": transfer_bound, "link_gbit": link_gbit,
            "link_bound_rows_per_s": link_bound, "actor_cpu_ms_per_row": actor_cpu_per_row * 1e3,
            "trainer_cpu_ms_per_row": trainer_cpu_per_row * 1e3,
            "daemon_cpu_ms_per_row": daemon_cpu_per_row * 1e3,
            "cores": cores, "engine_strided": strided,
            "read_share": read, "handoff_slopes": slopes, "rows": rows}


def handoff_slopes(sizes: dict) -> dict:
    """ms per MB between 1 MB and the largest size measured (the fixed cost taken out)."""
    one = sizes["1 MB"]
    big = max(sizes.values(), key=lambda v: v["bytes"])
    mbs = (big["bytes"] - one["bytes"]) / MB
    return {f"{k}_per_mb": (big[k] - one[k]) / mbs for k in ("round_trip_ms", "get_ready_ms")}


def read_share(stats: Optional[dict]) -> float:
    """The share of the 1-actor engine's busy time every actor repeats whatever N (reading and
    Parquet decoding: the stages before "batch"), from RayLoader.stats(actors=True)."""
    try:
        stages = stats["actors"][0]["loader"]["stages"]
    except (KeyError, IndexError, TypeError):
        return 0.0
    assemble = sum(s["busy_s"] for s in stages if s["name"] == "batch")
    total = sum(s["busy_s"] for s in stages)
    return (total - assemble) / total if total > 0 else 0.0


def run(profile: str, data_dir: str, out_dir: str, step_ms: float, repeats: Optional[int],
        link_gbit: float, configs: List[str], ray_cpus: int, normalise: bool = True,
        epochs: Optional[int] = None) -> dict:
    prof = PROFILES[profile]
    repeats = repeats or prof["repeats"]
    spec = SPECS[profile]["images"]
    path = ensure_images(os.path.join(data_dir, profile), spec, log=_log)
    facts = dataset_facts(path, ["image", "label"])
    batch_size = prof["batch_size"]
    batch_bytes = batch_size * 3 * IMAGE_SIZE * IMAGE_SIZE * (4 if normalise else 1)
    cores = os.cpu_count() or 2
    base = {"path": path, "batch_size": batch_size, "step_ms": step_ms, "ray_cpus": ray_cpus,
            "object_store_mb": 1024, "trainer_core": sorted(os.sched_getaffinity(0))[0],
            "batch_bytes": batch_bytes, "handoff_calls": prof["handoff_calls"],
            "epochs": epochs or prof["epochs"],
            "normalise": normalise}
    from .machine import describe

    report: Dict[str, Any] = {
        "profile": profile, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "machine": describe(), "dataset": {**{k: v for k, v in facts.items() if k != "files"},
                                      "path": _relative(facts["path"])},
        "settings": {**{k: v for k, v in base.items() if k != "path"}, "repeats": repeats,
                     "link_gbit": link_gbit, "seed": SEED,
                     "transforms": "decode_image, random_resized_crop(224), horizontal_flip, " +
                                   ("normalize(ImageNet mean/std) -> float32, to_chw" if normalise
                                    else "to_chw -> uint8 (no normalize)")},
        "configs": {}}
    _log(f"hand-off on a 2-node Cluster ({prof['handoff_calls']} calls per size)")
    report["handoff"] = run_job({**base, "config": "handoff"}, "bench.ray_scaleout", "--worker",
                                timeout=prof["timeout"], env=WORKER_ENV, timed=True)
    if report["handoff"]["status"] != "ok":
        _log(f"  handoff: {report['handoff'].get('reason')}")
    runs: Dict[str, List[dict]] = {c: [] for c in configs}
    for _ in range(repeats):  # interleaved: a change in the machine's load falls on every config
        for config in configs:
            _log(f"{config}: {LABELS[config]}")
            result = run_job({**base, "config": config}, "bench.ray_scaleout", "--worker",
                             timeout=prof["timeout"], env=WORKER_ENV, timed=True)
            _log(f"  {result['status']}: " + (f"{result['rows']} rows, {result['rows_per_s']:.1f} "
                 "rows/s" if result["status"] == "ok" else str(result.get("reason"))))
            runs[config].append(result)
    for config in configs:
        summary = _summarise(runs[config], facts["rows"])
        summary["label"] = LABELS[config]
        report["configs"][config] = summary
    local = report["configs"].get("local", {})
    for config, summary in report["configs"].items():
        if summary.get("status") == "ok" and local.get("status") == "ok":
            summary["vs_local"] = summary["rows_per_s"] / local["rows_per_s"]
            if config.startswith("ray_") and config != "ray_data":
                summary["bytes_equal_to_local"] = summary["crcs"] == local["crcs"]
    report["model"] = model(report["configs"], report["handoff"], cores, link_gbit, [1, 2, 8, 32])
    from .report import write_report

    name = "ray-scaleout" if profile == "quick" else f"ray-scaleout-{profile}"
    name += "" if normalise else "-uint8"

    base = write_report(report, out_dir, name, markdown(report))
    _log(f"wrote {base}.json/.md")
    return report


# ------------------------------------------------------------------------------ the report

def _fmt(value, spec=",.0f", none="") -> str:
    return none if value is None else format(value, spec)


def markdown(report: dict) -> str:
    s = report["settings"]
    m = report["machine"]
    load = ", ".join(f"{x:.1f}" for x in (m.get("load_average_at_start") or []))
    lines = [f"# Image preprocessing in the trainer or on Ray actors ({report['profile']})", "",
             f"Run {report['started']}, commit {m['git'].get('commit')}, on a shared "
             f"{m['cores']}-core machine (load average at the start: {load}): compare within this "
             f"run. {report['dataset']['rows']:,} JPEGs 500x375 q90 (bench/generators.py), batches "
             f"of {s['batch_size']}, {s['transforms']}. The trainer is pinned to core "
             f"{s['trainer_core']} and reads every byte of each batch once (CRC-32, the stand-in "
             f"for the host-to-device copy); step per batch: "
             f"{str(s['step_ms']) + ' ms (sleep)' if s['step_ms'] else 'none'}. Ray: "
             f"`ray.init(num_cpus={s['ray_cpus']})` on this machine, so the actors share its "
             f"{m['cores']} cores with the trainer. {s.get('epochs', 1)} epoch(s) per "
             f"configuration in a fresh process, {s['repeats']} run(s) each (median).", "",
             "| configuration | rows/s | steady rows/s | vs local | first batch s | "
             "CPU ms/row trainer | Ray workers | Ray daemons | total | whole run: total | "
             "batches = local's |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    ahead = []
    for key, c in report["configs"].items():
        if c.get("status") not in ("ok", "short"):
            lines.append(f"| {c['label']} | {c['status']}: {str(c.get('reason'))[:100]} "
                         "| | | | | | | | | |")
            continue
        cpu = c["steady_cpu_ms_per_row"]
        equal = c.get("bytes_equal_to_local")
        equal = "" if equal is None else ("**yes** (byte-identical)" if equal else "**NO**")
        if key == "local":
            equal = "(reference)"
        short = " (short epoch)" if c["status"] == "short" else ""
        mark = ""
        if len(c["epoch_rows"]) == 1 and c["first_batch_s"] > 0.5 * c["wall_s"]:
            mark = " (*)"
            ahead.append(c["label"])
        lines.append(f"| {c['label']}{short} | {c['rows_per_s']:,.1f} | "
                     f"{_fmt(c['steady_rows_per_s'], ',.1f')}{mark} | "
                     f"{_fmt(c.get('vs_local'), '.2f')}x | {c['first_batch_s']:.2f} | "
                     f"{cpu['trainer']:.2f} | {cpu['ray_workers']:.2f} | {cpu['ray_daemons']:.2f} "
                     f"| {sum(cpu.values()):.2f}{mark} | {sum(c['cpu_ms_per_row'].values()):.2f} "
                     f"| {equal} |")
    lines += ["", "rows/s: the first epoch's rows over the time from constructing the loader to "
              "its last batch (actor or Ray Data start-up included); steady: the later epochs' "
              "rows over the time from the end of the first epoch to the last batch (epoch "
              "boundaries included; with `--epochs 1` none, and CPU over the whole run). CPU "
              "per row over the steady window, by process: the trainer, Ray's worker processes "
              "(the actors, Ray Data's tasks) and Ray's daemons (raylet, GCS, ...); whole run: "
              "from constructing the loader, start-up included (actor processes' imports, Ray "
              "Data's planning and workers: one-off costs that weigh heavily in epochs this "
              "short). Ray Data decodes with Pillow at full size; stoker's decode_image shrinks "
              "in the DCT domain when the crop is resized to under half (its default), so its "
              "CPU per row is lower by design, not by tuning."]
    if ahead:
        lines += ["", f"(*) {'; '.join(ahead)}: the first batch came after more than half of the "
                  "run, most rows were made before it, so the steady window measures the "
                  "delivery of finished batches, not their making: compare rows/s and the "
                  "whole-run CPU."]
    lines.append("")
    stats = {k: c.get("stats") for k, c in report["configs"].items()
             if k.startswith("ray_") and k != "ray_data" and c.get("stats")}
    if stats:
        lines += ["RayLoader.stats() at the end of the epoch: per actor, batches received by the "
                  "trainer and the trainer's wait in `ray.get` for them (the hand-off plus any "
                  "wait for the actor to finish the batch):", ""]
        for key, value in stats.items():
            per_actor = "; ".join(
                f"actor {i}: {a.get('batches')} batches"
                + (f" ({a['bytes'] / MB:,.0f} MB)" if a.get("bytes") else "")
                + f", {a.get('wait_ms', 0):,.0f} ms "
                f"({a.get('wait_ms', 0) / max(a.get('batches') or 1, 1):.1f} ms per batch"
                + (f", {a.get('wait_ms', 0) / (a['bytes'] / MB):.2f} ms per MB" if a.get("bytes")
                   else "") + ")"
                for i, a in enumerate(value.get("actors") or []))
            lines.append(f"- `{key}`: {per_actor}; stall fraction "
                         f"{_fmt(value.get('stall_fraction'), '.2f', '?')}")
        lines.append("")
    strided = [c.get("engine_strided") for k, c in report["configs"].items()
               if k.startswith("ray_") and k != "ray_data" and c.get("status") == "ok"]
    if strided and not all(strided):
        lines += ["**This engine has no strided mode** (`Engine.start_epoch(epoch, start)`): "
                  "each RayLoader actor decodes EVERY batch and discards the other actors' "
                  "(stoker.ray's stand-in), so 2 actors do twice the work of 1 and the 2-actor "
                  "row is not a scale-out measurement; the model's prediction assumes the "
                  "strided engine.", ""]
    h = report["handoff"]
    lines += ["## The object-store hand-off alone", ""]
    if h.get("status") != "ok":
        lines += [f"failed: {h.get('reason')}", ""]
    else:
        lines += [f"An actor returns a pre-made numpy array; the trainer (pinned to one core) "
                  f"times `ray.get`. Two simulated nodes (`ray.cluster_utils.Cluster`, loopback). "
                  f"Median of {h['calls']} calls. *round trip*: call + the actor's copy into the "
                  "store + get; *submit*: the `.remote()` call alone; *get (ready)*: `ray.get` of "
                  "an object already finished (on the other node: includes the transfer to the "
                  "trainer's node); *pipelined*: time per "
                  "batch with 2 calls in flight (what one actor can hand over).", "",
                  "| where | size | round trip ms | per MB | submit ms | get (ready) ms | per MB | "
                  "pipelined ms |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for where, sizes in h["where"].items():
            for label, v in sizes.items():
                size = label if label != "batch" else f"a batch ({v['bytes'] / MB:.1f} MB)"
                mbs = v["bytes"] / MB
                per_mb = (lambda ms: _fmt(ms / mbs if mbs >= 1 else None, ".2f"))  # noqa: E731
                lines.append(f"| {where.replace('_', ' ')} | {size} | {v['round_trip_ms']:.2f} | "
                             f"{per_mb(v['round_trip_ms'])} | {v['submit_ms']:.2f} | "
                             f"{v['get_ready_ms']:.2f} | {per_mb(v['get_ready_ms'])} | "
                             f"{v['pipelined_ms']:.2f} |")
            slope = handoff_slopes(sizes)
            lines.append(f"| {where.replace('_', ' ')} | marginal, 1 MB to the largest | | "
                         f"{slope['round_trip_ms_per_mb']:.2f} | | | "
                         f"{slope['get_ready_ms_per_mb']:.2f} | |")
        lines.append("")
    mod = report.get("model")
    lines += ["## The projection model (docs/scaling.md, \"Ray loader: what to expect\")", ""]
    if not mod:
        lines += ["Not computed: the 1-actor run or the hand-off measurement did not complete.", ""]
    else:
        strided = ", every actor repeating the read share" if mod["engine_strided"] else \
            ", times N: without the strided engine every actor decodes every batch"
        lines += ["trainer rows/s = min(N x per-actor rows/s, batch rows / hand-off s per batch, "
                  "link bytes/s / bytes per row), where N x per-actor rows/s is "
                  "r1 / (read + (1 - read) / N)", "",
                  f"- r1, per-actor rows/s (steady, 1 actor, one engine thread): "
                  f"{mod['per_actor_rows_per_s']:,.1f}; actor CPU per row "
                  f"{mod['actor_cpu_ms_per_row']:.2f} ms",
                  f"- read: the share of the actor's engine time every actor repeats (reading and "
                  f"Parquet decoding all rows; the batch stage with the transform ops is what N "
                  f"actors divide): {mod['read_share']:.3f}",
                  f"- hand-off per batch (the trainer's `.remote()` + `ray.get` of a ready "
                  f"{mod['batch_rows']:.0f}-row batch on its node): "
                  f"{mod['handoff_ms_per_batch']:.2f} ms -> at most "
                  f"{mod['handoff_bound_rows_per_s']:,.0f} rows/s",
                  f"- transfer: `ray.get` of a ready batch on the other simulated node "
                  f"(loopback, one at a time): {mod['transfer_ms_per_batch']:.2f} ms -> at most "
                  f"{mod['transfer_bound_rows_per_s']:,.0f} rows/s",
                  f"- link: {mod['bytes_per_row'] / 1e3:,.1f} kB per row; {mod['link_gbit']:g} "
                  f"Gbit/s carries at most {mod['link_bound_rows_per_s']:,.0f} rows/s",
                  f"- this machine: {mod['cores']} cores less those other jobs kept busy during "
                  "the run (the machine's busy time less this run's processes'), over the CPU "
                  f"per row delivered: trainer {mod['trainer_cpu_ms_per_row']:.2f} ms + Ray's "
                  f"daemons {mod['daemon_cpu_ms_per_row']:.2f} ms + the actor CPU above"
                  f"{strided}", "",
                  "| actors N | actors bound | hand-off bound | transfer bound | link bound | "
                  "on CPU nodes: model (binding) | this machine: cores left by other jobs | "
                  "cores bound | this machine: model (binding) | measured steady | measured / "
                  "model | measured (start-up included) |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
                  "| ---: |"]
        for r in mod["rows"]:
            t, h = r["terms"], r["terms_here"]
            ratio = r.get("measured_over_predicted_here")
            lines.append(f"| {r['actors']} | {t['actors']:,.1f} | {t['hand-off']:,.0f} | "
                         f"{t['transfer']:,.0f} | {t['link']:,.0f} | "
                         f"{r['predicted_rows_per_s']:,.1f} ({r['binding']}) | "
                         f"{r['free_cores']:.2f} | "
                         f"{h['cores']:,.1f} | {r['predicted_here_rows_per_s']:,.1f} "
                         f"({r['binding_here']}) | "
                         f"{_fmt(r.get('measured_steady_rows_per_s'), ',.1f', '-')} | "
                         f"{_fmt(ratio, '.2f', '-')} | "
                         f"{_fmt(r.get('measured_rows_per_s'), ',.1f', '-')} |")
        lines += ["", f"On {mod['cores']} shared cores the scale-out itself cannot show: the "
                  "actors and the trainer compete for the same cores, so what is checked here is "
                  "the model with this machine's cores against the 1- and 2-actor runs (steady "
                  "rates: the model has no start-up). The rows for 8 and 32 actors are the "
                  "model's projection for actors on CPU nodes, each with its own core: the "
                  "per-actor rate measured here, the hand-off and transfer measured here, the "
                  "link as given (`--link-gbit`).", ""]
    return "\n".join(lines) + "\n"


def _relative(path: str) -> str:
    """``path`` relative to the repository, as committed reports hold it."""
    return os.path.relpath(path, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ray_scaleout", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help="comma-separated subset of " + ",".join(CONFIGS))
    parser.add_argument("--step-ms", type=float, default=0.0,
                        help="a fixed simulated training step per batch (sleep); default none")
    parser.add_argument("--repeats", type=int, help="runs per configuration (median)")
    parser.add_argument("--epochs", type=int, help="epochs per run (default 2: the first with "
                        "the start-up, the others the steady state)")
    parser.add_argument("--link-gbit", type=float, default=10.0,
                        help="the link between CPU nodes and the trainer, for the projection")
    parser.add_argument("--ray-cpus", type=int, default=2, help="ray.init(num_cpus=)")
    parser.add_argument("--no-normalise", dest="normalise", action="store_false",
                        help="deliver uint8 CHW crops (no normalize: a quarter of the bytes); "
                             "report ray-scaleout[-profile]-uint8.*")
    parser.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    parser.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    parser.add_argument("--render", metavar="JSON",
                        help="recompute the model of a saved report and rewrite its .md")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(json.loads(args.worker))
    if args.render:
        with open(args.render) as f:
            report = json.load(f)
        s = report["settings"]
        report["model"] = model(report["configs"], report["handoff"], report["machine"]["cores"],
                                s["link_gbit"], [1, 2, 8, 32])
        with open(args.render, "w") as f:
            json.dump(report, f, indent=1)
        with open(args.render[:-len(".json")] + ".md", "w") as f:
            f.write(markdown(report))
        return 0
    configs = [c for c in args.configs.split(",") if c]
    unknown = set(configs) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configs: {sorted(unknown)}")
    report = run(args.profile, args.data_dir, args.out_dir, args.step_ms, args.repeats,
                 args.link_gbit, configs, args.ray_cpus, args.normalise, args.epochs)
    ok = all(c.get("status") == "ok" for c in report["configs"].values()) and \
        report["handoff"]["status"] == "ok" and \
        all(c.get("bytes_equal_to_local", True) for c in report["configs"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
