"""Rank and world size: from the arguments, torch.distributed, or torchrun's environment."""

from __future__ import annotations

import os
import secrets
import sys
from typing import Optional, Tuple

from .errors import InvalidOptionError

__all__ = ["agree_on_seed", "default_num_threads", "resolve_rank"]


def _process_group():
    """torch.distributed when the program imported torch and initialised a group, else None.

    Importing torch here would cost every other user seconds of start-up, so it is only looked
    at when already imported.
    """
    if "torch" not in sys.modules:
        return None
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if dist.is_available() and dist.is_initialized():
        return dist
    return None


def resolve_rank(rank: Optional[int], world_size: Optional[int]) -> Tuple[int, int]:
    """(rank, world_size): given, else the process group's, else RANK/WORLD_SIZE, else (0, 1)."""
    if (rank is None) != (world_size is None):
        raise InvalidOptionError("give both rank and world_size, or neither")
    if rank is not None:
        return int(rank), int(world_size)
    dist = _process_group()
    if dist is not None:
        return dist.get_rank(), dist.get_world_size()
    env_rank, env_world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if (env_rank is None) != (env_world is None):
        raise InvalidOptionError(
            f"the environment sets {'RANK' if env_world is None else 'WORLD_SIZE'} but not "
            f"{'WORLD_SIZE' if env_world is None else 'RANK'}; set both, or pass rank= and "
            "world_size=")
    if env_rank is not None and env_world is not None:
        try:
            return int(env_rank), int(env_world)
        except ValueError:
            raise InvalidOptionError(
                f"RANK={env_rank!r} / WORLD_SIZE={env_world!r} in the environment are not integers"
            ) from None
    return 0, 1


def agree_on_seed(seed: Optional[int], world_size: int, shuffle: bool = True) -> int:
    """The seed every rank uses. A given seed is used as is. ``None`` draws one; with
    ``world_size > 1`` the ranks must agree (each drawing its own would deal some rows to two
    ranks and others to none), so rank 0's draw is broadcast through the process group, and
    without an initialised group this is an error that asks for ``seed=``. Without shuffling the
    seed decides nothing, and each rank keeps its own draw."""
    if seed is not None:
        return int(seed)
    drawn = secrets.randbits(63)
    if world_size <= 1 or not shuffle:
        return drawn
    dist = _process_group()
    if dist is None:
        raise InvalidOptionError(
            f"seed=None with world_size={world_size}: the ranks must share one seed, and no "
            "torch.distributed process group is initialised to share a drawn one; pass the same "
            "seed= on every rank (or call torch.distributed.init_process_group() first)")
    box = [drawn]
    dist.broadcast_object_list(box, src=0)
    return int(box[0])


def default_num_threads() -> int:
    """Worker threads when ``num_threads`` is not given: the CPUs this process may use
    (affinity mask and cgroup quota), shared evenly by the ranks torchrun starts on this node
    (``LOCAL_WORLD_SIZE``), at least 1."""
    from . import _stoker

    cpus = _stoker.usable_cpus()
    try:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        local = 1
    return max(1, cpus // max(1, local))
