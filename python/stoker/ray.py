"""Disaggregated preprocessing on Ray: N Ray actors run stoker's engine, the training process
receives their finished batches in order (docs/scaling.md, "Ray: disaggregated preprocessing").

    loader = stoker.ray.RayLoader(source, num_actors=4, actor_options={"num_cpus": 8},
                                  batch_size=256, transforms={...}, seed=7)
    for batch in loader:        # batch i of this rank: byte-equal to stoker.Loader's batch i
        ...

The training process holds a *planning* :class:`stoker.Loader` (same options, never iterated:
its engine opens the dataset's metadata but reads no data). It gives ``len()``, the seed, rank
and world size (detected as a Loader detects them), the fingerprints and the resume state: its
epoch cursor is driven here exactly as ``Loader.__iter__`` drives it, so ``state_dict()`` is the
planning Loader's and loads into either kind of loader.

Actor ``j`` of ``N`` opens a Loader with the same options (rank, world size and seed given
explicitly) and runs its engine in strided mode (``start_epoch(epoch, start, step)``): batches
``j, j + N, j + 2N, ...`` of the rank's epoch, each byte-identical to that batch of the whole
stream (its own index seeds its random transforms). What N actors divide is assembly and the
transform ops that run there; each still reads and decodes every window's Parquet columns
(cpp/src/exec/README.md, "strided").

The trainer keeps at most ``batches_in_flight`` ``next`` calls submitted per actor (an actor runs
its calls in order) and takes them in global order (batch ``i`` from actor ``i % N``): a slow
trainer stops submitting, the actor's engine fills its prefetch and blocks. An actor that dies is
replaced and restarted at the first batch of its stride the trainer has not received.
"""

from __future__ import annotations

import collections
import os
import time
from typing import Any, Deque, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np

try:
    import ray
    from ray.exceptions import RayActorError
except ImportError as error:  # pragma: no cover  (ray is an optional dependency)
    raise ImportError("stoker.ray needs Ray: pip install 'ray[data]'") from error

from ._convert import map_arrays
from ._ragged import Ragged
from ._epochs import EpochIterator
from .errors import InternalError, InvalidOptionError, LoaderClosedError
from .loader import Loader

__all__ = ["RayLoader"]

# The actor's engine.next() waits this long per call before looking again.
_POLL_MS = 100
# A batch whose actor died this many times in a row is not tried again: its error is raised.
_MAX_TRIES_PER_BATCH = 3
# close() waits at most this long for the killed actors to refuse calls (ray.kill is asynchronous).
_KILL_WAIT_S = 10.0
# Loader options that belong to the training process; the actors cannot honour them.
_TRAINER_ONLY = {
    "device": "device= moves batches to an accelerator in the training process; use "
              "output='torch' and move each batch with .to(device) (the batches arrive in host "
              "memory from Ray's object store)",
    "pin_memory": "pin_memory= pins batches for device=; RayLoader delivers host batches "
                  "(pin them in the training process if you need to)",
    "augment": "augment= runs on the delivered batches in the training process's Loader; with "
               "RayLoader, do that work in transforms= (stoker.ops chains, run by the actors) or "
               "in transform= (a callable the actors run per row group)",
}
# Options the planning Loader (never iterated) does not need: no threads, no cache folder.
_PLANNING_OVERRIDES = {"num_threads": 1, "num_io_threads": 1, "python_workers": 0}
_PLANNING_DROPS = ("cache_dir",)


def _nbytes(value: Any) -> int:
    if isinstance(value, Ragged):
        return _nbytes(value.values) + _nbytes(value.offsets)
    return int(getattr(value, "nbytes", 0))


def _await_deaths(actors: List[Any], timeout_s: float) -> None:
    """Returns once each killed actor refuses a call, or after ``timeout_s``. ``ray.kill`` only
    asks the cluster to kill: a call made just after it can still run (about 1 in 6 on a local
    cluster), so close() would leave actors that answer. A refused call also marks the handle
    dead here, so every later call fails at once."""
    deadline = time.monotonic() + timeout_s
    for actor in actors:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                ray.get(actor.__ray_ready__.remote(), timeout=left)
            except RayActorError:
                break
            except Exception:  # noqa: BLE001  (timed out, or Ray shut down: stop waiting)
                return
            time.sleep(0.002)


def _start_strided(engine: Any, epoch: int, elastic: Optional[Tuple[int, int]], start: int,
                  step: int) -> int:
    """Starts ``engine`` on batches ``start, start + step, ...`` of ``epoch`` (of the rest of an
    elastic epoch: ``elastic`` is (old world size, batches each old rank delivered)), each
    byte-identical to that batch of the whole stream. Returns the epoch's (or rest's) total
    batch count, every stride's."""
    if elastic is not None:
        return int(engine.start_elastic_epoch(epoch, elastic[0], elastic[1], start, step))
    engine.start_epoch(epoch, start, step)
    return int(engine.num_batches)


class _Worker:
    """One actor: a stoker.Loader whose engine delivers one stride of the rank's batches."""

    def __init__(self, sources: Any, options: Dict[str, Any]) -> None:
        self._loader = Loader(sources, **options)
        self._engine = self._loader._live()
        self._next_index = 0  # index (in the full stream) of the engine's next batch
        self._step = 1  # the stride
        self._total = 0
        self._delivered = 0

    def start(self, epoch: int, seed: int, elastic: Optional[Tuple[int, int]], start: int,
              step: int) -> Dict[str, Any]:
        total = self._start(epoch, seed, elastic, start, step)
        return {"total": total, "node_id": ray.get_runtime_context().get_node_id(),
                "pid": os.getpid()}

    def next(self, index: int) -> Optional[Dict[str, Any]]:
        """Batch ``index`` of the epoch as host arrays (numpy; Ragged for ragged columns);
        None if the epoch ended before it."""
        return self._next(index)

    def stop(self) -> None:
        self._engine.stop()

    def _start(self, epoch: int, seed: int, elastic: Optional[Tuple[int, int]], start: int,
               step: int) -> int:
        engine = self._engine
        engine.stop()
        if seed != self._loader._seed:  # a state loaded in the trainer brought another seed
            engine.set_seed(seed)
            self._loader._seed = seed
        self._total = _start_strided(engine, epoch, elastic, start, step)
        self._step = step
        self._next_index = start
        return self._total

    def _next(self, index: int) -> Optional[Dict[str, Any]]:
        engine, loader = self._engine, self._loader
        while True:
            batch, done = engine.next(_POLL_MS)
            if batch is None:
                if done:
                    return None
                continue
            at = self._next_index
            self._next_index += self._step
            if at != index:
                raise InternalError(f"actor expected batch {index}, its engine gave batch {at}")
            out = loader._route.host(batch)
            del batch
            if loader._finishing is not None:
                out = loader._finishing.batch(out)
            self._delivered += 1
            return out

    def flush_cache(self) -> None:
        self._loader.flush_cache()

    @ray.method(concurrency_group="control")
    def stats(self) -> Dict[str, Any]:
        stats = self._loader.stats()
        stats["delivered"] = self._delivered
        return stats


# next/start/stop run in the default group (one at a time, in the order submitted); stats() in its
# own group, so it answers while a next() waits on the engine.
_RemoteWorker = ray.remote(concurrency_groups={"control": 1})(_Worker)


class _Starter:
    """What EpochCursor.begin() calls as the engine: starts the actors instead."""

    def __init__(self, loader: "RayLoader") -> None:
        self._loader = loader

    @property
    def num_batches(self) -> int:
        return self._loader._total

    def start_epoch(self, epoch: int, start: int) -> None:
        self._loader._start(epoch, None, start)

    def start_elastic_epoch(self, epoch: int, old_world_size: int, old_batches: int,
                            start: int) -> int:
        return self._loader._start(epoch, (old_world_size, old_batches), start)


class RayLoader:
    """``stoker.Loader(sources, **loader_options)``'s batches, made by ``num_actors`` Ray actors.

    Args:
        sources: as ``stoker.Loader``'s ``source``; every actor's node must see it (object
            storage, a shared filesystem, or the same path on every node).
        num_actors: actors (each a stoker engine with its own threads); actor ``j`` makes
            batches ``j, j + num_actors, ...`` of this rank's epoch.
        actor_options: passed to the actor class's ``.options(...)``: ``num_cpus``,
            ``resources`` (e.g. ``{"preprocess": 1}`` to land on CPU nodes),
            ``scheduling_strategy``, ``runtime_env``... Default ``{"num_cpus": 1}``.
            ``max_restarts`` must be 0 (the loader replaces a dead actor itself).
        batches_in_flight: ``next`` calls submitted per actor and not yet taken by the training
            loop (at least 1): with the engine's ``prefetch_bytes``, what bounds the memory.
        **loader_options: every ``stoker.Loader`` option but ``device``, ``pin_memory`` and
            ``augment`` (InvalidOptionError). ``num_threads``, ``prefetch_bytes``,
            ``cache_dir``... apply to each actor's engine.
    """

    def __init__(self, sources: Any, *, num_actors: int = 2,
                 actor_options: Optional[Mapping[str, Any]] = None, batches_in_flight: int = 2,
                 **loader_options: Any) -> None:
        self._actors: List[Any] = []
        self._plan: Optional[Loader] = None
        for name, value in (("num_actors", num_actors), ("batches_in_flight", batches_in_flight)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidOptionError(f"{name} must be an integer >= 1, got {value!r}")
        for name, why in _TRAINER_ONLY.items():
            if loader_options.get(name) not in (None, False):
                raise InvalidOptionError(f"RayLoader does not take {name}=: {why}")
        actor_options = dict(actor_options if actor_options is not None else {"num_cpus": 1})
        if actor_options.get("max_restarts", 0) != 0:
            raise InvalidOptionError(
                "actor_options['max_restarts'] must be 0: RayLoader replaces a dead actor itself, "
                "restarted at the first batch the training loop has not received")
        actor_options["max_restarts"] = 0
        self._num_actors, self._in_flight = num_actors, batches_in_flight
        self._actor_options = actor_options
        self._sources = sources
        planning = {k: v for k, v in loader_options.items() if k not in _PLANNING_DROPS}
        planning.update(_PLANNING_OVERRIDES)
        self._plan = plan = Loader(sources, **planning)
        self._actor_loader_options = dict(loader_options, rank=plan._options.rank,
                                          world_size=plan._options.world_size, seed=plan.seed)
        self._total = 0
        self._epoch_args: Tuple[int, Optional[Tuple[int, int]]] = (0, None)
        self._pending: List[Deque[Tuple[int, Any]]] = [collections.deque()
                                                       for _ in range(num_actors)]
        self._next_submit = [0] * num_actors
        self._where: List[Dict[str, Any]] = [{} for _ in range(num_actors)]
        self._batches = [0] * num_actors
        self._bytes = [0] * num_actors
        self._wait_s = [0.0] * num_actors
        self._replaced = [0] * num_actors
        self._actors = [self._new_actor() for _ in range(num_actors)]

    # ----------------------------------------------------------------------------------- facts

    @property
    def seed(self) -> int:
        return self._live_plan().seed

    @property
    def epoch(self) -> int:
        return self._live_plan().epoch

    @property
    def columns(self) -> Dict[str, Any]:
        return self._live_plan().columns

    @property
    def num_rows(self) -> int:
        return self._live_plan().num_rows

    @property
    def dataset_rows(self) -> int:
        return self._live_plan().dataset_rows

    def vocabulary(self, column: str) -> List[str]:
        return self._live_plan().vocabulary(column)

    @property
    def num_actors(self) -> int:
        return self._num_actors

    @property
    def planning_loader(self) -> Loader:
        """The trainer's Loader that plans (never iterated): rank, world size, seed, state."""
        return self._live_plan()

    def __len__(self) -> int:
        return len(self._live_plan())

    def __repr__(self) -> str:
        if self._plan is None:
            return "RayLoader(closed)"
        return f"RayLoader(actors={self._num_actors}, {self._plan!r})"

    # ---------------------------------------------------------------------- state and epochs

    def state_dict(self) -> Dict[str, Any]:
        """The same state as ``stoker.Loader.state_dict()``: loads into either."""
        return self._live_plan().state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """As ``stoker.Loader.load_state_dict`` (a Loader's state, any world size)."""
        self._live_plan().load_state_dict(state)

    def set_epoch(self, epoch: int) -> None:
        self._live_plan().set_epoch(epoch)

    # ------------------------------------------------------------------------------- actors

    def _new_actor(self) -> Any:
        return _RemoteWorker.options(**self._actor_options).remote(self._sources,
                                                         self._actor_loader_options)

    def _first(self, slot: int, start: int) -> int:
        """The first batch >= start of ``slot``'s stride."""
        return start + (slot - start) % self._num_actors

    def _start(self, epoch: int, elastic: Optional[Tuple[int, int]], start: int) -> int:
        """Starts every actor on its stride of ``epoch`` from ``start``; returns the total."""
        self._epoch_args = (epoch, elastic)
        n = self._num_actors
        # The actor whose stride holds `start` first: its start is valid (start <= total) and
        # tells the total of an elastic rest; a stride whose first batch is past the end starts
        # at the end (nothing to deliver).
        lead = start % n
        self._total = self._started(lead, start, self._submit_start(lead, start))
        firsts = {slot: min(self._first(slot, start), self._total) for slot in range(n)}
        refs = {slot: self._submit_start(slot, firsts[slot]) for slot in range(n) if slot != lead}
        for slot, ref in refs.items():
            total = self._started(slot, firsts[slot], ref)
            if total != self._total:
                raise InternalError(f"actor {slot} counts {total} batches, actor {lead} "
                                    f"{self._total}")
        for slot in range(n):
            self._pending[slot].clear()
            self._next_submit[slot] = firsts[slot]
            self._top_up(slot)
        return self._total

    def _submit_start(self, slot: int, first: int) -> Any:
        epoch, elastic = self._epoch_args
        return self._actors[slot].start.remote(epoch, self._plan.seed, elastic, first,
                                               self._num_actors)

    def _started(self, slot: int, first: int, ref: Any) -> int:
        """Waits for a start call; an actor that died meanwhile is replaced and started anew.
        Returns the total batch count the actor saw."""
        for tries in range(_MAX_TRIES_PER_BATCH):
            try:
                where = ray.get(ref)
                break
            except RayActorError:
                if self._plan is None:  # close() (from another thread) killed it
                    raise LoaderClosedError("this RayLoader was closed") from None
                if tries + 1 == _MAX_TRIES_PER_BATCH:
                    raise
                self._replace_actor(slot)
                ref = self._submit_start(slot, first)
        self._where[slot] = {"node_id": where["node_id"], "pid": where["pid"]}
        return where["total"]

    def _top_up(self, slot: int) -> None:
        pending, actor = self._pending[slot], self._actors[slot]
        while len(pending) < self._in_flight and self._next_submit[slot] < self._total:
            index = self._next_submit[slot]
            pending.append((index, actor.next.remote(index)))
            self._next_submit[slot] += self._num_actors

    def _replace_actor(self, slot: int) -> None:
        try:
            ray.kill(self._actors[slot], no_restart=True)
        except Exception:  # noqa: BLE001  (already gone)
            pass
        self._actors[slot] = self._new_actor()
        self._replaced[slot] += 1

    def _restart_slot(self, slot: int, index: int) -> None:
        """A new actor for ``slot``, started at ``index`` (the first batch of its stride the
        training loop has not received), its calls submitted again."""
        self._replace_actor(slot)
        self._started(slot, index, self._submit_start(slot, index))
        self._pending[slot].clear()
        self._next_submit[slot] = index
        self._top_up(slot)

    def _receive(self, index: int) -> Dict[str, Any]:
        slot = index % self._num_actors
        failures = 0
        stall = self._actors_plan()._stall
        while True:
            if self._plan is None:  # closed (from another thread) meanwhile
                raise LoaderClosedError("this RayLoader was closed")
            if not self._pending[slot]:
                self._top_up(slot)
            at, ref = self._pending[slot][0]
            if at != index:
                raise InternalError(f"batch {index} expected from actor {slot}, next is {at}")
            waited = time.perf_counter()
            try:
                out = ray.get(ref)
            except RayActorError:
                if self._plan is None:  # close() (from another thread) killed it
                    raise LoaderClosedError("this RayLoader was closed") from None
                failures += 1
                if failures >= _MAX_TRIES_PER_BATCH:
                    raise
                self._restart_slot(slot, index)
                continue
            finally:
                seconds = time.perf_counter() - waited
                self._wait_s[slot] += seconds
                stall.wait_s += seconds
            self._pending[slot].popleft()
            self._top_up(slot)
            if out is None:
                raise InternalError(f"actor {slot}'s epoch ended before batch {index}")
            self._batches[slot] += 1
            self._bytes[slot] += sum(_nbytes(value) for value in out.values())
            return out

    def _drop_pending(self) -> None:
        """Forgets the submitted calls and stops the actors' engines. The calls are not
        cancelled: Ray's ordered actor queues wait (30 s) for a cancelled call's sequence
        number; each actor finishes its at most ``batches_in_flight`` calls (batches its engine
        has mostly made), then stops."""
        for slot, pending in enumerate(self._pending):
            pending.clear()
            self._next_submit[slot] = self._total
            try:
                self._actors[slot].stop.remote()
            except Exception:  # noqa: BLE001  (a dead actor: replaced at the next start)
                pass

    # ------------------------------------------------------------------------------ iteration

    def _deliver(self, out: Dict[str, Any]) -> Dict[str, Any]:
        route = self._plan._route
        if route.output_kind == "torch":
            # ray.get's arrays are read-only views of the object store: torch tensors get
            # their own (writable) copies.
            out = {key: map_arrays(value, np.array) for key, value in out.items()}
        return route.output(out)

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        plan = self._actors_plan()
        generation = plan._new_generation("a newer iter(loader)")
        with plan._handover:
            if generation != plan._generation:
                return EpochIterator(plan._ended(generation), lambda: None)
            self._drop_pending()
            plan._running = None
            plan._at.begin(_Starter(self))
            plan._running = generation
            plan._stall.start()
        return EpochIterator(self._iterate(plan, generation),
                             lambda: self._stop_unstarted(plan, generation))

    def _stop_unstarted(self, plan: Loader, generation: int) -> None:
        with plan._handover:
            if generation == plan._generation and plan._running == generation:
                plan._running = None
                plan._stall.end()
                self._drop_pending()

    def _iterate(self, plan: Loader, generation: int) -> Iterator[Dict[str, Any]]:
        try:
            while True:
                with plan._handover:
                    plan._check_generation(generation)
                    index, total = plan._at.position, plan._at.batches
                if index >= total:
                    break
                if self._plan is None:
                    raise LoaderClosedError("this RayLoader is closed")
                batch = self._deliver(self._receive(index))
                with plan._handover:
                    plan._check_generation(generation)
                    plan._at.handed_out()
                yield batch
            with plan._handover:
                if generation == plan._generation:
                    plan._at.done = True
        finally:
            with plan._handover:
                if generation == plan._generation:
                    plan._running = None
                    plan._stall.end()
                    if self._plan is not None:
                        self._drop_pending()

    # ------------------------------------------------------------------------------ lifecycle

    def stats(self, actors: bool = False) -> Dict[str, Any]:
        """The hand-off's counters: per actor slot ``batches`` (received by the training loop),
        ``bytes`` (their arrays' bytes), ``wait_ms`` (time spent in ``ray.get`` for them),
        ``replacements``, ``node_id``, ``pid`` and ``in_flight`` (calls submitted, not yet
        received); totals ``batches``, ``bytes``, ``wait_ms``, ``replacements``; the training
        loop's ``loop_s`` and ``stall_fraction``. With
        ``actors=True`` each slot also has ``loader``: its actor's ``Loader.stats()`` (cache,
        stages...) plus ``delivered`` (batches it returned), asked from the actor."""
        plan = self._actors_plan() if actors else self._live_plan()
        slots = [{"batches": self._batches[k], "bytes": self._bytes[k],
                  "wait_ms": self._wait_s[k] * 1e3,
                  "replacements": self._replaced[k], "in_flight": len(self._pending[k]),
                  **self._where[k]} for k in range(self._num_actors)]
        if actors:
            for slot, stats in zip(slots, ray.get([a.stats.remote() for a in self._actors])):
                slot["loader"] = stats
        out = {"num_actors": self._num_actors, "batches_in_flight": self._in_flight,
               "actors": slots, "batches": sum(self._batches), "bytes": sum(self._bytes),
               "wait_ms": sum(self._wait_s) * 1e3, "replacements": sum(self._replaced)}
        out.update(plan._stall.read())
        return out

    def flush_cache(self) -> None:
        """Waits until every actor has written the ``cache_dir`` entries it queued so far (as
        ``Loader.flush_cache``; after the calls already submitted to it)."""
        self._actors_plan()
        ray.get([actor.flush_cache.remote() for actor in self._actors])

    def _live_plan(self) -> Loader:
        plan = self._plan
        if plan is None:
            raise LoaderClosedError("this RayLoader is closed")
        return plan

    def _actors_plan(self) -> Loader:
        """``_live_plan()`` for the calls that reach the actors. After ``ray.shutdown()`` the
        actors are gone with the cluster, and any Ray call would start a new local Ray (8 s)
        only to fail on objects it does not know: the loader is closed instead."""
        plan = self._live_plan()
        if not ray.is_initialized():
            self.close()
            raise LoaderClosedError(
                "Ray was shut down (ray.shutdown()) while this RayLoader was open, and its "
                "actors with it: make a new RayLoader after ray.init()")
        return plan

    def close(self) -> None:
        """Kills the actors (``ray.kill``), waits until they refuse calls (at most 10 s) and
        closes the planning Loader; a live iteration then raises LoaderClosedError. Safe to
        call twice."""
        plan, self._plan = self._plan, None
        actors, self._actors = self._actors, []
        for pending in getattr(self, "_pending", ()):
            pending.clear()
        if not ray.is_initialized():
            # ray.shutdown() ended them (this driver owns them), and ray.kill would start a new
            # local Ray (7.8 s here) to kill actors that are gone.
            actors = []
        killed = []
        for actor in actors:
            try:
                ray.kill(actor, no_restart=True)
                killed.append(actor)
            except Exception:  # noqa: BLE001  (Ray already shut down, actor gone)
                pass
        _await_deaths(killed, _KILL_WAIT_S)
        if plan is not None:
            plan.close()

    def __enter__(self) -> "RayLoader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001  (interpreter exit)
            pass
