"""Resume and elastic resume: what ``Loader.state_dict()`` holds, and what a saved state means
for the loader that loads it (``Loader.load_state_dict``). The state's shape is checked by
:func:`stoker._state.check_state` before anything here reads it.

A state saved by another rank of the same world size is this rank's position too (the ranks of a
data-parallel job are at the same step). A state saved at another world size resumes
elastically: the rest of the epoch is the rows the old ranks had not delivered yet, shared by the
new ranks, ``(old world size, batches each old rank delivered)``.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

from . import _stoker
from ._state import STATE_VERSION, check_state
from .errors import StateMismatchError

__all__ = ["Resumable", "make_state", "option_summary", "differences", "plan_resume"]


def make_state(epoch: int, batch: int, seed: int, engine: Any, rank: int, world_size: int,
               elastic: Optional[tuple], options: Dict[str, int]) -> Dict[str, Any]:
    """The state dict: plain ints (``options`` a dict of ints), as torch.save keeps them."""
    return {
        "version": STATE_VERSION,
        "epoch": epoch,
        "batch": batch,
        "seed": seed,
        "fingerprint": engine.fingerprint,
        "data_fingerprint": engine.data_fingerprint,
        "rank": rank,
        "world_size": world_size,
        # Set while delivering the rest of an epoch resumed on another world size.
        "elastic_world_size": elastic[0] if elastic else 0,
        "elastic_batch": elastic[1] if elastic else 0,
        # What the fingerprints cover, as plain ints, so a mismatch names what differs.
        "options": options,
    }


def option_summary(opts: Any, engine: Any, transforms: Any, transform_fingerprint: str,
                   has_transform: bool) -> Dict[str, int]:
    """What the options fingerprint covers, one int per option (CRCs of the larger ones): the
    engine's OptionSummary (cpp/src/options/summary.cc), beside the fingerprint it explains."""
    return _stoker.option_summary(opts, engine.dataset_fingerprint, engine.shuffle_window_rows,
                                  transforms, transform_fingerprint, has_transform)


def differences(state: Mapping[str, Any], mine: Mapping[str, int]) -> str:
    """What differs between a saved state's options and ``mine`` (option_summary), for the
    error of a fingerprint mismatch (the engine's OptionDifferences)."""
    return _stoker.option_differences(state.get("options"), dict(mine))


def plan_resume(state: Mapping[str, Any], engine: Any, rank: int, world_size: int, seed: int,
                seed_given: bool, summary: Any) -> Tuple[Optional[tuple], int]:
    """Where a checked ``state`` puts this loader: ``(elastic, resume_batch)``; ``elastic`` is
    (old world size, batches each old rank delivered) for the rest of an elastic epoch, else
    None. Raises StateMismatchError when the state cannot resume here. ``summary()`` gives this
    loader's option_summary (asked only for the error)."""
    saved_rank = (state.get("rank"), state.get("world_size"))
    saved_elastic = (state.get("elastic_world_size", 0), state.get("elastic_batch", 0))
    same_data = state.get("data_fingerprint") == engine.data_fingerprint
    elastic = None
    if saved_rank[1] is not None and saved_rank[1] != world_size and same_data:
        if saved_elastic[0]:
            raise StateMismatchError(
                f"this state was saved during the rest of an epoch resumed on world_size="
                f"{saved_rank[1]}; it resumes only at world_size={saved_rank[1]} (or start "
                f"the next epoch with set_epoch({state['epoch'] + 1}))")
        elastic = (saved_rank[1], state["batch"])
    elif saved_rank[1] == world_size and saved_rank[0] != rank and same_data:
        # Another rank of the same job: the ranks of a data-parallel job are at the same step
        # (equal batches per rank, lockstep), so its position is this rank's position too.
        # This is what "save the checkpoint on rank 0" (Lightning, most DDP scripts) needs.
        pass
    elif state["fingerprint"] != engine.fingerprint:
        raise StateMismatchError(
            "state_dict was saved by a loader with other options or another dataset "
            f"(fingerprint {state['fingerprint']:#x}, this loader {engine.fingerprint:#x}); "
            + differences(state, summary()))
    if state["seed"] != seed and seed_given:
        raise StateMismatchError(
            f"state_dict has seed={state['seed']} but this loader was created with "
            f"seed={seed}; pass seed={state['seed']} or seed=None")
    if elastic is not None and elastic[1] > engine.num_batches_at(elastic[0]):
        raise StateMismatchError(
            f"state_dict batch={elastic[1]} is outside the "
            f"{engine.num_batches_at(elastic[0])} batches per rank at world_size={elastic[0]}")
    if elastic is None and saved_elastic[0]:
        elastic = saved_elastic  # the rest of an elastic epoch, resumed at the same size
        if elastic[1] > engine.num_batches_at(elastic[0]):
            raise StateMismatchError(
                f"state_dict elastic_batch={elastic[1]} is outside the "
                f"{engine.num_batches_at(elastic[0])} batches per rank at "
                f"world_size={elastic[0]}")
    elif elastic is None and not 0 <= state["batch"] <= engine.num_batches:
        raise StateMismatchError(
            f"state_dict batch={state['batch']} is outside this epoch's {engine.num_batches} "
            "batches")
    resumed_here = elastic is None or saved_elastic[0]
    return elastic, state["batch"] if resumed_here else 0


class Resumable:
    """``state_dict`` and ``load_state_dict`` of :class:`stoker.Loader` (its base class): they
    read and set the loader's epoch cursor (``_at``) under its hand-over lock, as set_epoch()
    does (loader.py, "Hand-over rule")."""

    def state_dict(self) -> Dict[str, int]:
        """Exactly what the caller has received: the epoch and the batches of it delivered (a
        completed epoch reads as the start of the next), plus the seed and options fingerprint.
        Plain ints: ``torch.save`` / ``torch.load(weights_only=True)`` keep it as is."""
        epoch, batch, elastic = self._at.saved(running=self._running is not None)
        return make_state(epoch, batch, self._seed, self._live(), self._options.rank,
                          self._options.world_size, elastic, self._option_summary())

    def _option_summary(self) -> Dict[str, int]:
        return option_summary(self._options, self._live(), self._transforms,
                              self._transform_fingerprint, self._runner is not None)

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Makes the next iteration yield exactly the batches the saved loader would have.

        A state saved by another rank of the same world size is this rank's position too (the
        ranks of a data-parallel job are at the same step), so a checkpoint saved on rank 0 serves
        every rank. A state saved at another world size (every rank at the same step) resumes
        elastically: the next iteration delivers this rank's share of the
        rows the old ranks had not delivered yet, then epochs go on at this world size.

        Ends a live iterator of this loader, as ``set_epoch`` does.
        """
        state = check_state(state)  # every key's type and range, before anything is used
        engine = self._live()
        elastic, resume_batch = plan_resume(state, engine, self._options.rank,
                                            self._options.world_size, self._seed,
                                            self._seed_given, self._option_summary)
        self._new_generation("load_state_dict()")  # an iterator waiting in next() lets go
        with self._handover:
            self._end_running("load_state_dict()")
            if state["seed"] != self._seed:
                # The seed only enters the per-epoch plan: nothing is re-read.
                self._seed = state["seed"]
                engine.set_seed(self._seed)
            self._at.resume(state["epoch"], elastic, resume_batch)
