"""Device hand-off: batches arrive on a GPU, copied from pinned slabs on a side stream while the
training step runs, with the next batch's copy already in flight.

The loader allocates its batch slabs page-locked (``pin_memory``), so ``tensor.to(device,
non_blocking=True)`` is a true asynchronous DMA with no staging copy. ``DeviceFeeder`` keeps one
batch ahead: it enqueues the copy of batch i+1 on its own stream before handing out batch i; the
consumer's stream waits for the copy (an event), and the host slab of a batch is released only
once its copy has finished.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from ._convert import map_arrays
from .errors import InvalidOptionError

__all__ = ["DeviceFeeder", "move_batch", "parse_device"]


def parse_device(device: Any) -> Optional[Any]:
    """None or a CPU device: no hand-off. A CUDA device: a ``torch.device`` that exists here."""
    if device is None:
        return None
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise InvalidOptionError(f"device={device!r} is not a torch device") from None
    if parsed.type == "cpu":
        return None
    if parsed.type != "cuda":
        raise InvalidOptionError(f"device={device!r}: only 'cpu' and 'cuda[:N]' are supported")
    if not torch.cuda.is_available():
        raise InvalidOptionError(
            f"device={device!r}: torch sees no CUDA device here (torch.cuda.is_available() is "
            "False); use device=None and move batches yourself, or run where a GPU is")
    index = parsed.index if parsed.index is not None else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise InvalidOptionError(
            f"device={device!r}: there are {torch.cuda.device_count()} CUDA device(s)")
    return torch.device("cuda", index)


def move_batch(batch: Dict[str, Any], move: Callable[[Any], Any]) -> Dict[str, Any]:
    """``move`` applied to every tensor of a batch (each level of a nested Ragged too)."""
    return {key: map_arrays(value, move) for key, value in batch.items()}


class DeviceFeeder:
    """Wraps an iterator of host batches into one of device batches, one batch ahead.

    ``copy(batch) -> (device_batch, done)`` enqueues the copies and returns a callable that waits
    for them on the consumer's side; the CUDA version is built by :meth:`cuda`. Keeping the
    pipelining separate from the CUDA calls lets the CPU tests run all of it.
    """

    def __init__(self, copy: Callable[[Dict[str, Any]], Tuple[Dict[str, Any], Callable[[], None]]]):
        self._copy = copy

    @classmethod
    def cuda(cls, device: Any) -> "DeviceFeeder":
        import torch

        stream = torch.cuda.Stream(device)

        def copy(batch):
            with torch.cuda.stream(stream):
                moved = move_batch(batch, lambda t: t.to(device, non_blocking=True))
                event = torch.cuda.Event()
                event.record(stream)

            def done():
                keep_alive = batch  # noqa: F841  (this closure holds the host slab until the copy is done)
                consumer = torch.cuda.current_stream(device)
                consumer.wait_event(event)  # the step's kernels start after the copy
                # The tensors were allocated on the side stream: tell the caching allocator the
                # consumer's stream uses them, so their memory is not reused too early.
                for value in moved.values():
                    map_arrays(value, lambda tensor: tensor.record_stream(consumer))
                event.synchronize()  # the host slab may be reused once `done` is dropped

            return moved, done

        return cls(copy)

    def __call__(self, host_batches: Iterator[Dict[str, Any]]) -> Iterator[Dict[str, Any]]:
        pending = None
        for host in host_batches:
            ahead = self._copy(host)  # batch i+1's copy is in flight ...
            del host  # ... and holds the only reference the feeder needs
            if pending is not None:
                moved, done = pending
                done()
                yield moved  # ... while the caller runs its step on batch i
            pending = ahead
        if pending is not None:
            moved, done = pending
            done()
            yield moved
