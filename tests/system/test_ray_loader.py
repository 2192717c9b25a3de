"""stoker.ray.RayLoader on a local Ray cluster of two simulated nodes (ray.cluster_utils.Cluster):
its actors land on different nodes (a custom resource per node), and every batch is byte-equal to
what a local stoker.Loader with the same options delivers: with 2 actors, after an actor is
killed mid-epoch (replaced, the same batches), resumed from a state into 1 actor and into a plain
Loader (and a Loader's state into a RayLoader, elastic world sizes included), with a slow
training loop (the calls and batches the actors hold stay bounded), with a per-node cache (the
second epoch hits it), and with output="torch".

The data: 1200 rows of tabular columns and a small JPEG per row, decoded and randomly cropped
and flipped by the engine (so the seeds of random transforms must match across actors).
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

import stoker  # noqa: E402
import stoker.ray  # noqa: E402,F401
from stoker import ops  # noqa: E402
from stoker.errors import InvalidOptionError, LoaderClosedError  # noqa: E402
from stoker_testdata import batch_bytes, jpeg_bytes  # noqa: E402

# One cluster (two raylets) for the module: about 10 s to start on 2 busy cores.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROWS, BATCH = 1200, 60  # 20 batches per epoch at world size 1
# Each simulated node offers one "prep": an actor asking for it lands on a node of its own.
ON_PREP = {"num_cpus": 0, "resources": {"prep": 1}}


def _options(**extra):
    options = dict(batch_size=BATCH, seed=5, shuffle_window=300, num_threads=1,
                   columns=["id", "x", "label", "image"],
                   transforms={"image": [ops.decode_image(), ops.random_crop([12, 12]),
                                         ops.horizontal_flip()]})
    options.update(extra)
    return options


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(0)
    images = [jpeg_bytes(rng, 20, 16) for _ in range(64)]
    table = pa.table({"id": np.arange(ROWS), "x": rng.normal(size=ROWS).astype(np.float32),
                      "label": rng.integers(0, 10, ROWS),
                      "image": pa.array([images[i % 64] for i in range(ROWS)], pa.binary())})
    path = str(tmp_path_factory.mktemp("ray-loader") / "data.parquet")
    pq.write_table(table, path, row_group_size=150)
    return path


@pytest.fixture(scope="module")
def cluster():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    if ray.is_initialized():
        ray.shutdown()
    store = 100 * 1024 * 1024  # per node (Ray's default is 30% of RAM); the batches are small
    nodes = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"prep": 1}, "object_store_memory": store})
    nodes.add_node(num_cpus=1, resources={"prep": 1}, object_store_memory=store)
    runtime_env = {}
    # Running from a source tree whose stoker is not the installed one (a git worktree): the
    # workers start through the same wrapper as this process.
    if os.environ.get("STOKER_TEST_RAY_PY_EXECUTABLE"):
        runtime_env["py_executable"] = os.environ["STOKER_TEST_RAY_PY_EXECUTABLE"]
    ray.init(address=nodes.address, include_dashboard=False, runtime_env=runtime_env,
             logging_level="ERROR")
    yield nodes
    ray.shutdown()
    nodes.shutdown()


def _local(data, epochs=1, **options):
    with stoker.Loader(data, **_options(**options)) as loader:
        return [[batch_bytes([batch]) for batch in loader] for _ in range(epochs)]


def _bytes(batches):
    return [batch_bytes([batch]) for batch in batches]


def test_two_actors_on_two_nodes_deliver_the_local_loaders_batches(cluster, data):
    expected = _local(data, epochs=2)
    with stoker.ray.RayLoader(data, num_actors=2, actor_options=ON_PREP, **_options()) as loader:
        assert len(loader) == ROWS // BATCH
        got = [_bytes(loader) for _ in range(2)]  # two epochs: epoch 1 has another order
        stats = loader.stats(actors=True)
        state = loader.state_dict()
    assert got[0] == expected[0] and got[1] == expected[1]
    assert expected[0] != expected[1]
    assert len({slot["node_id"] for slot in stats["actors"]}) == 2, stats["actors"]
    assert [slot["batches"] for slot in stats["actors"]] == [ROWS // BATCH] * 2  # 2 epochs / 2
    assert stats["replacements"] == 0 and stats["wait_ms"] > 0
    with stoker.Loader(data, **_options()) as plain:
        nbytes = sum(value.nbytes for batch in plain for value in batch.values())
    assert stats["bytes"] == sum(slot["bytes"] for slot in stats["actors"]) == 2 * nbytes
    for slot in stats["actors"]:  # strided: each engine made only its own share of batches
        assert slot["loader"]["batches"] == slot["loader"]["delivered"] == ROWS // BATCH
    assert (state["epoch"], state["batch"]) == (2, 0)


def test_an_actor_killed_mid_epoch_is_replaced_and_the_batches_are_the_same(cluster, data):
    expected = _local(data)[0]
    got = []
    with stoker.ray.RayLoader(data, num_actors=2, actor_options=ON_PREP, **_options()) as loader:
        for i, batch in enumerate(loader):
            got.append(batch_bytes([batch]))
            if i == 6:
                victim = loader.stats()["actors"][1]
                os.kill(victim["pid"], signal.SIGKILL)
        stats = loader.stats()
    assert got == expected
    assert stats["replacements"] == 1 and stats["actors"][1]["replacements"] == 1
    assert stats["actors"][1]["pid"] != victim["pid"]


def test_a_state_resumes_in_any_number_of_actors_and_in_a_plain_loader(cluster, data):
    expected, next_epoch = _local(data, epochs=2)
    with stoker.ray.RayLoader(data, num_actors=2, actor_options=ON_PREP, **_options()) as loader:
        head = []
        for batch in loader:
            head.append(batch_bytes([batch]))
            if len(head) == 7:
                break
        state = loader.state_dict()
    assert head == expected[:7] and state["batch"] == 7

    with stoker.ray.RayLoader(data, num_actors=1, actor_options=ON_PREP, **_options()) as one:
        one.load_state_dict(state)
        assert _bytes(one) == expected[7:]
    with stoker.Loader(data, **_options()) as plain:
        plain.load_state_dict(state)
        assert _bytes(plain) == expected[7:]
        # ...and a Loader's state (after 3 batches) into a RayLoader.
        plain.set_epoch(0)
        for i, _ in enumerate(plain):
            if i == 2:
                break
        plain_state = plain.state_dict()
    # Elastic: rank 0 of 2 saved after 4 batches; resumed at world size 1 the rest equals a
    # plain Loader's elastic rest (then the next epoch at world size 1).
    with stoker.Loader(data, **_options(rank=0, world_size=2)) as rank0:
        for i, _ in enumerate(rank0):
            if i == 3:
                break
        elastic_state = rank0.state_dict()
    with stoker.Loader(data, **_options()) as plain:
        plain.load_state_dict(elastic_state)
        rest = [_bytes(plain) for _ in range(2)]
    assert len(rest[0]) < ROWS // BATCH and rest[1] == next_epoch

    # Three actors (without the "prep" resource: anywhere), made with seed=None: the loader
    # takes the states' seed, and so do its actors.
    with stoker.ray.RayLoader(data, num_actors=3, actor_options={"num_cpus": 0},
                              **_options(seed=None)) as three:
        assert three.seed != plain_state["seed"]
        three.load_state_dict(plain_state)  # a Loader's state, after 3 batches
        assert three.seed == plain_state["seed"]
        assert _bytes(three) == expected[3:]
        # Near the end, more actors than batches left: a stride that starts past the end is
        # empty.
        three.load_state_dict(dict(plain_state, batch=ROWS // BATCH - 1))
        assert _bytes(three) == expected[-1:]
        assert _bytes(three) == next_epoch
        three.load_state_dict(elastic_state)
        assert [_bytes(three) for _ in range(2)] == rest


def test_a_slow_training_loop_bounds_what_the_actors_hold(cluster, data):
    in_flight, share = 1, ROWS // 20 // 2  # batches of 20 rows: 30 for each of the 2 actors
    with stoker.ray.RayLoader(data, num_actors=2, actor_options=ON_PREP,
                              batches_in_flight=in_flight,
                              **_options(batch_size=20, prefetch_bytes="64KiB")) as loader:
        for i, batch in enumerate(loader):
            time.sleep(0.15 if i < 7 else 1.0)  # the actors could finish their share meanwhile
            stats = loader.stats(actors=True)
            for slot in stats["actors"]:
                assert slot["in_flight"] <= in_flight
                # Returned by the actor, not yet taken by the loop: at most its calls in flight.
                assert slot["loader"]["delivered"] - slot["batches"] <= in_flight, slot
            if i == 7:
                break
        assert stats["batches"] == 8
        for slot in stats["actors"]:
            # Each engine stopped at its prefetch bound, far from its share of the epoch.
            assert slot["batches"] == 4 and slot["loader"]["batches"] < share // 2, slot
            assert slot["loader"]["peak_inflight_bytes"] <= 256 * 1024


def test_the_cache_on_each_actors_node_serves_the_second_epoch(cluster, data, tmp_path):
    expected = _local(data, epochs=2)
    cache = str(tmp_path / "cache")
    with stoker.ray.RayLoader(data, num_actors=2, actor_options=ON_PREP,
                              **_options(cache_dir=cache)) as loader:
        first = _bytes(loader)
        loader.flush_cache()
        second = _bytes(loader)
        stats = loader.stats(actors=True)
    assert [first, second] == expected
    assert os.listdir(cache)
    for slot in stats["actors"]:
        assert slot["loader"]["cache"]["hits"] > 0, slot["loader"]["cache"]


def test_torch_output_is_writable_copies_equal_to_the_loaders(cluster, data):
    torch = pytest.importorskip("torch")
    with stoker.Loader(data, **_options(output="torch")) as plain:
        expected = [{k: v.clone() for k, v in b.items()} for b in plain]
    with stoker.ray.RayLoader(data, num_actors=2, actor_options=ON_PREP,
                              **_options(output="torch")) as loader:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # torch.from_numpy on a read-only array warns
            got = list(loader)
    assert len(got) == len(expected)
    for mine, theirs in zip(got, expected):
        assert mine.keys() == theirs.keys()
        for key in mine:
            assert isinstance(mine[key], torch.Tensor) and torch.equal(mine[key], theirs[key])
        mine["x"] += 1  # writable, private to this process


def test_break_restarts_promptly_and_close_stops_the_actors(cluster, data):
    expected = _local(data)[0]
    loader = stoker.ray.RayLoader(data, num_actors=2, actor_options=ON_PREP, **_options())
    for i, batch in enumerate(loader):
        if i == 2:
            break  # the calls in flight are dropped; the next iteration starts the epoch anew
    started = time.perf_counter()
    assert _bytes(loader) == expected  # an unfinished epoch starts again (a Loader's rule)
    assert time.perf_counter() - started < 20
    it = iter(loader)
    batch = next(it)
    assert not batch["x"].flags.writeable  # zero-copy from the object store
    actors = list(loader._actors)
    started = time.perf_counter()
    loader.close()
    assert time.perf_counter() - started < 10
    for actor in actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.stop.remote(), timeout=30)
    with pytest.raises(LoaderClosedError):
        next(it)
    with pytest.raises(LoaderClosedError):
        len(loader)

    dropped = stoker.ray.RayLoader(data, num_actors=2, actor_options=ON_PREP, **_options())
    next(iter(dropped))
    actors = list(dropped._actors)
    del dropped
    gc.collect()
    for actor in actors:  # dropping the loader kills its actors too
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.stop.remote(), timeout=30)


def test_killed_actors_refuse_calls_once_close_returns(cluster):
    # ray.kill only asks: a call made just after it ran on 6 of 48 actors here (7 of 40 on a
    # local Ray), so without the wait this fails about 4 times in 5. An actor is a process
    # importing Ray (1-3 s of CPU each on 2 cores): 12 of them.
    @ray.remote(num_cpus=0)
    class Echo:
        def echo(self):
            return 1

    actors = [Echo.remote() for _ in range(12)]
    ray.get([actor.__ray_ready__.remote() for actor in actors])
    answered = 0
    for actor in actors:
        ray.kill(actor, no_restart=True)
        stoker.ray._await_deaths([actor], 30)
        try:
            ray.get(actor.echo.remote(), timeout=30)
            answered += 1
        except ray.exceptions.RayActorError:
            pass
    assert answered == 0


_CLOSE_AFTER_SHUTDOWN = """
import os, sys, ray, stoker.ray
runtime_env = {"py_executable": sys.argv[2]} if sys.argv[2] else {}
ray.init(address="local", num_cpus=1, include_dashboard=False, logging_level="ERROR",
         runtime_env=runtime_env, object_store_memory=80 * 1024 * 1024)
from stoker.errors import LoaderClosedError
loader = stoker.ray.RayLoader(sys.argv[1], num_actors=1, batch_size=60, columns=["id"], seed=5)
it = iter(loader)
next(it)
ray.shutdown()
try:
    next(it)
except LoaderClosedError as error:
    print("next:", error)
loader.close()
print("initialized after close:", ray.is_initialized())
"""


def test_after_ray_shutdown_the_loader_is_closed_and_starts_no_new_ray(data):
    # Any Ray call after ray.shutdown() starts a new local Ray (8 s): ray.kill in close() to
    # kill actors that are gone, ray.get in next() to fail on objects it does not know.
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
    proc = subprocess.run([sys.executable, "-c", _CLOSE_AFTER_SHUTDOWN, data,
                           os.environ.get("STOKER_TEST_RAY_PY_EXECUTABLE", "")],
                          capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "next: Ray was shut down (ray.shutdown())" in proc.stdout, proc.stdout + proc.stderr
    assert "initialized after close: False" in proc.stdout, proc.stdout + proc.stderr[-3000:]


def test_trainer_only_options_are_refused(cluster, data):
    for option in ({"device": "cuda"}, {"augment": lambda batch, rng: batch},
                   {"pin_memory": True}):
        with pytest.raises(InvalidOptionError, match="RayLoader does not take"):
            stoker.ray.RayLoader(data, num_actors=1, **_options(**option))
    with pytest.raises(InvalidOptionError, match="max_restarts"):
        stoker.ray.RayLoader(data, actor_options={"max_restarts": 2}, **_options())
    with pytest.raises(InvalidOptionError, match="num_actors"):
        stoker.ray.RayLoader(data, num_actors=0, **_options())


def test_a_transform_callable_runs_in_the_actors(cluster, data):
    def doubled(arrays):  # defined here: Ray pickles it by value for the actors
        return {"id": arrays["id"], "x": arrays["x"] * 2}

    options = dict(batch_size=BATCH, seed=5, columns=["id", "x"], transform=doubled,
                   transform_columns=["id", "x"], num_threads=1)
    with stoker.Loader(data, **options) as plain:
        expected = _bytes(plain)
    with stoker.ray.RayLoader(data, num_actors=2, actor_options=ON_PREP, **options) as loader:
        got = _bytes(loader)
        stages = [s["name"] for s in loader.stats(actors=True)["actors"][0]["loader"]["stages"]]
    assert got == expected and "transform" in stages


def test_an_error_in_an_actor_reaches_the_loop_as_stokers_error(cluster, tmp_path):
    path = str(tmp_path / "bad.parquet")
    pq.write_table(pa.table({"id": np.arange(40),
                             "image": pa.array([b"not an image"] * 40, pa.binary())}), path)
    with stoker.ray.RayLoader(path, num_actors=2, actor_options=ON_PREP, batch_size=10,
                              transforms={"image": [ops.decode_image(),
                                                    ops.center_crop([4, 4])]}) as loader:
        with pytest.raises(stoker.errors.CorruptFileError, match="not a JPEG"):
            list(loader)
        assert loader.stats()["replacements"] == 0
