"""Runs the user's Python callables (``transform=``, ``augment=``) for the engine's workers.

Contract shared by the thread and process modes (same order, same results):

- ``runner.call(name, arrays, where, rng_key=None)`` runs ``functions[name]`` on ``arrays`` (a dict
  of numpy arrays, one row group's columns or one batch) and returns its dict of numpy arrays.
  With ``rng_key`` (a tuple of ints) the callable is called as ``fn(arrays, augment_rng(rng_key))``.
- A user exception becomes :class:`~stoker.errors.TransformError` whose message starts with
  ``where`` (e.g. "file 'x.parquet', row group 3") and names the callable and the exception; a
  worker process that dies becomes :class:`~stoker.errors.WorkerCrashedError` naming ``where``.
- ``close()`` stops every worker promptly; calls after it raise ``LoaderClosedError``.

``ThreadRunner`` calls in the caller's thread (the engine's worker thread holding the GIL).
``ProcessRunner`` (``python_workers=N``) runs the callables in N spawned processes and moves the
arrays through shared memory.

Process mode, the choices a reviewer would question:

- Every shared-memory segment is created, grown and unlinked by the parent (one input and one
  output arena per worker), so a worker that dies leaves nothing in ``/dev/shm``; the worker maps
  the segments without registering them with multiprocessing's resource tracker (registering
  would make the tracker unlink them, or warn, when the worker exits).
- Numeric and bool arrays (and the two arrays of a :class:`~stoker.Ragged`) are copied once into
  the arena and rebuilt as views on the other side; only (offset, dtype, shape) descriptors are
  pickled. Object arrays and anything else are pickled. Results are copied out of the output
  arena (large ones into memory from Arrow's allocator, which reuses freed pages: a fresh
  numpy allocation faults its pages in, several times the cost of the copy), so they own their
  memory; the worker's input views are valid during the call only. A
  result that is one of the input views itself (a column passed through, e.g. ``{**arrays,
  "x": ...}``) is not copied into the output arena: the parent copies it from the input arena,
  where it already is (modified in place or not), saving one copy of its bytes.
- A worker that dies mid-call raises WorkerCrashedError for that call only; the pool replaces the
  process for later calls (a callable that crashes every time therefore fails every call, never
  hangs). A worker that cannot load the callables (unpicklable in the child, e.g. defined in
  ``python -c``) fails the runner for good with InvalidOptionError.
- Workers ignore SIGINT (the parent handles Ctrl-C and closes the pool) and exit when the parent
  process goes away (a watchdog thread polls the parent pid; the pipe's EOF does the same).
- After ``os.fork()`` the child's copy of a runner is closed: calls raise LoaderClosedError, and
  closing it never touches the parent's processes or segments.
"""

from __future__ import annotations

import atexit
import itertools
import mmap
import multiprocessing
import multiprocessing.connection
import multiprocessing.process
import multiprocessing.util  # noqa: F401  (registers its atexit hook before ours: ours runs first)
import os
import pickle
import secrets
import signal
import sys
import threading
import time
import traceback
import weakref
from multiprocessing import shared_memory
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np
import pyarrow as pa

from ._convert import from_torch
from ._ragged import Ragged
from .errors import InvalidOptionError, LoaderClosedError, TransformError, WorkerCrashedError

__all__ = ["ThreadRunner", "ProcessRunner", "make_runner", "augment_rng", "check_python_options"]

Arrays = Dict[str, np.ndarray]

START_METHODS = ("spawn", "forkserver")


def augment_rng(key: Tuple[int, ...]) -> np.random.Generator:
    """The ``numpy.random.Generator`` an ``augment=`` call receives: Philox keyed by ``key``
    (seed, epoch, global batch index); the same key always gives the same stream."""
    mask = 2**64 - 1
    seed, epoch, batch = (int(k) & mask for k in key)
    # uint64 arrays: numpy converts a list holding an int >= 2**63 through float64 (wrongly).
    return np.random.Generator(np.random.Philox(
        key=np.array([seed, 0x5354_4F4B_4552], dtype=np.uint64),
        counter=np.array([batch, epoch, 0, 0], dtype=np.uint64)))


def _user_error(name: str, where: str, error: BaseException) -> TransformError:
    return TransformError(f"{where}: {name}= raised {type(error).__name__}: {error}")


def _not_a_dict(name: str, where: str, out: Any) -> TransformError:
    return TransformError(
        f"{where}: {name}= must return a dict of arrays, got {type(out).__name__}")


class ThreadRunner:
    """Calls the callables in the calling thread."""

    def __init__(self, functions: Mapping[str, Callable[..., Any]]) -> None:
        self._functions = dict(functions)
        self._closed = False

    def call(self, name: str, arrays: Arrays, where: str,
             rng_key: Optional[Tuple[int, ...]] = None) -> Arrays:
        if self._closed:
            raise LoaderClosedError("the loader is closed")
        fn = self._functions[name]
        try:
            out = from_torch(fn(arrays) if rng_key is None else fn(arrays, augment_rng(rng_key)))
        except Exception as error:  # the user's code: any exception is theirs to name
            raise _user_error(name, where, error) from error
        if not isinstance(out, Mapping):
            raise _not_a_dict(name, where, out)
        return dict(out)

    def close(self) -> None:
        self._closed = True


# ---------------------------------------------------------------------------------------------
# Shared-memory encoding: a dict of values -> (descriptors, bytes needed); both sides use it.

_ALIGN = 64
# Results at least this large are copied out into Arrow-allocated memory (see _owned_copy).
_ARROW_COPY_MIN = 1 << 16


def _in_arena(value: Any) -> bool:
    return type(value) is np.ndarray and not value.dtype.hasobject


def _layout(values: Mapping[str, Any], reuse: Optional[Mapping[int, tuple]] = None
            ) -> Tuple[list, int]:
    """Descriptors for ``values`` and the arena bytes they need. An array in the arena is
    ("a", offset, dtype, shape) (offset -1: empty, needs no bytes); a Ragged of two such arrays
    is ("r", kind, values_spec, offsets_spec); anything else is ("o", value), pickled.

    ``reuse`` (the worker's inputs, by ``id``: (array, spec)): an output that *is* one of the
    input views (a column passed through) is not copied into the output arena: its spec is
    ("i", offset, dtype, shape), the bytes where they already are, in the input arena."""
    total = 0

    def place(array: np.ndarray) -> tuple:
        nonlocal total
        if reuse is not None:
            hit = reuse.get(id(array))
            if hit is not None and hit[0] is array:
                return hit[1]
        if array.nbytes == 0:
            return ("a", -1, array.dtype, array.shape)
        offset = -(-total // _ALIGN) * _ALIGN
        total = offset + array.nbytes
        return ("a", offset, array.dtype, array.shape)

    specs = []
    for key, value in values.items():
        if _in_arena(value):
            specs.append((key, place(value), value))
        elif (isinstance(value, Ragged) and _in_arena(value.values)
              and _in_arena(value.offsets)):
            specs.append((key, ("r", value.kind, place(value.values), place(value.offsets)),
                          value))
        else:
            specs.append((key, ("o", value), None))
    return specs, total


def _write(specs: list, buf: Any) -> list:
    """Copies the arrays of a layout into ``buf`` (not those left in the input arena, "i");
    returns the picklable descriptors."""

    def put(spec: tuple, array: np.ndarray) -> None:
        if spec[0] == "a" and spec[1] >= 0:
            dest = np.ndarray(spec[3], spec[2], buffer=buf, offset=spec[1])
            np.copyto(dest, array, casting="no")

    out = []
    for key, spec, value in specs:
        if spec[0] in ("a", "i"):
            put(spec, value)
        elif spec[0] == "r":
            put(spec[2], value.values)
            put(spec[3], value.offsets)
        out.append((key, spec))
    return out


def _read(descriptors: list, buf: Any, copy: bool, in_buf: Any = None) -> Dict[str, Any]:
    """Rebuilds the values: views on ``buf`` (``in_buf`` for "i" specs; ``copy=False``) or
    arrays that own their memory."""

    def get(spec: tuple) -> np.ndarray:
        if spec[1] < 0:
            return np.empty(spec[3], spec[2])
        view = np.ndarray(spec[3], spec[2], buffer=buf if spec[0] == "a" else in_buf,
                          offset=spec[1])
        return _owned_copy(view) if copy else view

    out: Dict[str, Any] = {}
    for key, spec in descriptors:
        if spec[0] in ("a", "i"):
            out[key] = get(spec)
        elif spec[0] == "r":
            out[key] = Ragged(get(spec[2]), get(spec[3]), spec[1])
        else:
            out[key] = spec[1]
    return out


def _owned_copy(view: np.ndarray) -> np.ndarray:
    """A copy of ``view`` in memory from Arrow's allocator (mimalloc or jemalloc), writable, 64-byte
    aligned. A large numpy allocation is a fresh mmap whose pages fault in on the first write (and
    the results live on in the batches, so malloc cannot recycle them): that cost several times
    the copy itself; Arrow's pool keeps freed pages for the next call."""
    if view.nbytes < _ARROW_COPY_MIN:
        return view.copy()
    memory = np.frombuffer(pa.allocate_buffer(view.nbytes), dtype=np.uint8)
    out = memory.view(view.dtype).reshape(view.shape)
    np.copyto(out, view, casting="no")
    return out


def _inputs_by_id(descriptors: list, inputs: Mapping[str, Any]) -> Dict[int, tuple]:
    """The worker's input views that sit in the input arena, by ``id``: (view, "i" spec)."""
    reuse: Dict[int, tuple] = {}

    def add(spec: tuple, view: Any) -> None:
        if spec[0] == "a" and spec[1] >= 0:
            reuse[id(view)] = (view, ("i",) + tuple(spec[1:]))

    for key, spec in descriptors:
        value = inputs[key]
        if spec[0] == "a":
            add(spec, value)
        elif spec[0] == "r":
            add(spec[2], value.values)
            add(spec[3], value.offsets)
    return reuse


# ---------------------------------------------------------------------------------------------
# The worker process.

try:  # POSIX shared memory, as multiprocessing.shared_memory opens it
    import _posixshmem
except ImportError:  # pragma: no cover (Windows: stoker is POSIX-only)
    _posixshmem = None


def _map_segment(arena: Optional[Tuple[str, int]]) -> Any:
    """Maps a parent-owned segment without registering it with the resource tracker."""
    if arena is None:
        return None
    name, size = arena
    fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def _watch_parent(parent_ppid: int) -> None:
    # The parent (or the fork server) exiting re-parents this process: then nobody will ask for
    # results any more, even while the user's callable runs.
    while True:
        time.sleep(0.25)
        if os.getppid() != parent_ppid:
            os._exit(0)


def _worker_main(conn: Any, payload: bytes) -> None:
    """Entry point of a worker process: load the callables, then serve calls until "stop"."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True,
                     name="stoker-parent-watch").start()
    try:
        functions = pickle.loads(payload)
    except BaseException:
        conn.send(("failed", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    maps: Dict[str, Any] = {"in": (None, None), "out": (None, None)}

    def segment(which: str, arena: Optional[Tuple[str, int]]) -> Any:
        if maps[which][0] != arena:  # the parent grew it: map the new one
            maps[which] = (arena, _map_segment(arena))  # the old map goes once unreferenced
        return maps[which][1]

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "stop":
            return
        _, name, in_arena, out_arena, descriptors, rng_key = message
        inputs = _read(descriptors, segment("in", in_arena), copy=False)
        reuse = _inputs_by_id(descriptors, inputs)
        try:
            fn = functions[name]
            out = from_torch(fn(inputs) if rng_key is None else fn(inputs, augment_rng(rng_key)))
        except Exception as error:
            try:
                text = str(error)
            except Exception:
                text = f"<{type(error).__name__} whose str() failed>"
            conn.send(("raised", type(error).__name__, text, traceback.format_exc()))
            reuse = None
            continue
        finally:
            del inputs
        if not isinstance(out, Mapping):
            conn.send(("not_a_dict", type(out).__name__))
            reuse = None
            continue
        # Columns passed through stay in the input arena (the parent copies them from there).
        specs, needed = _layout(out, reuse)
        reuse = None
        if needed > (out_arena[1] if out_arena else 0):
            conn.send(("grow", needed))
            reply = conn.recv()
            if reply[0] != "arena":
                return  # the parent gave up on this call (closing)
            out_arena = reply[1]
        try:
            written = _write(specs, segment("out", out_arena))
            conn.send(("ok", written))
        except Exception as error:  # an unpicklable value: nothing was sent
            conn.send(("unsendable", f"{type(error).__name__}: {error}"))


# ---------------------------------------------------------------------------------------------
# The parent side.

_segment_ids = itertools.count()


class _Arena:
    """One parent-owned shared-memory segment; grown by replacing it."""

    def __init__(self) -> None:
        self.shm: Optional[shared_memory.SharedMemory] = None

    @property
    def spec(self) -> Optional[Tuple[str, int]]:
        return (self.shm.name, self.shm.size) if self.shm is not None else None

    def ensure(self, size: int) -> None:
        if size == 0 or (self.shm is not None and self.shm.size >= size):
            return
        old = self.shm.size if self.shm is not None else 0
        new = max(size, 2 * old, 1 << 20)
        new = -(-new // mmap.PAGESIZE) * mmap.PAGESIZE
        self.release()
        name = f"stoker_{os.getpid()}_{next(_segment_ids)}_{secrets.token_hex(4)}"
        self.shm = shared_memory.SharedMemory(name=name, create=True, size=new)

    def unlink(self) -> None:
        """Removes the name (the memory goes once nobody maps it); safe while another thread
        still uses the mapping."""
        shm = self.shm
        if shm is not None and not getattr(shm, "_stoker_unlinked", False):
            shm._stoker_unlinked = True
            try:
                shm.unlink()
            except FileNotFoundError:
                pass

    def release(self) -> None:
        self.unlink()
        shm, self.shm = self.shm, None
        if shm is not None:
            try:
                shm.close()
            except BufferError:  # a view is still alive somewhere: the GC unmaps it later
                pass


class _Died(Exception):
    pass


class _Worker:
    """One worker process, its pipe and its two arenas. Used by one thread at a time."""

    def __init__(self, context: Any, payload: bytes, index: int) -> None:
        parent_end, child_end = context.Pipe(duplex=True)
        self.process = context.Process(target=_worker_main, args=(child_end, payload),
                                       name=f"stoker-python-worker-{index}", daemon=True)
        self.process.start()
        child_end.close()
        self.conn = parent_end
        self.pid = self.process.pid
        self.ready = False
        self.inputs = _Arena()
        self.outputs = _Arena()

    def receive(self) -> tuple:
        """The worker's next message; raises _Died if the process ends first. The wait releases
        the GIL (and is interruptible by Ctrl-C in the main thread)."""
        ready = multiprocessing.connection.wait([self.conn, self.process.sentinel])
        if self.conn in ready:
            try:
                return self.conn.recv()
            except (EOFError, OSError):
                pass
        raise _Died()

    def exit_reason(self) -> str:
        self.process.join(1.0)
        code = self.process.exitcode
        if code is None:
            return "closed its pipe"
        if code < 0:
            try:
                return f"killed by signal {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"

    def stop(self) -> None:
        try:
            self.conn.send(("stop",))
        except (OSError, ValueError):
            pass

    def kill(self) -> None:
        if self.process.exitcode is None:
            try:
                self.process.kill()
            except (OSError, ValueError):
                pass

    def dispose(self) -> None:
        """Ends the process and frees its pipe and segments (by the thread that owns it)."""
        self.kill()
        try:
            self.process.join(5.0)
        except (AssertionError, ValueError):
            pass
        self.conn.close()
        self.inputs.release()
        self.outputs.release()
        # No process.close(): close() may still be joining this process from another thread.


_LIVE_RUNNERS: "weakref.WeakSet[ProcessRunner]" = weakref.WeakSet()


class ProcessRunner:
    """Runs the callables in ``workers`` processes (``python_workers=N``).

    Thread safety: ``call`` may be used from many threads at once; each call takes an idle worker
    (waiting, GIL released, while all are busy) and waits for its reply with the GIL released.
    ``close`` may be called from any thread, at any time, more than once.
    """

    def __init__(self, functions: Mapping[str, Callable[..., Any]], workers: int,
                 start_method: str = "spawn") -> None:
        self._names = dict.fromkeys(functions)
        self._workers = workers
        self._payload = pickle.dumps(dict(functions))
        self._context = multiprocessing.get_context(start_method)
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._slots: List[Optional[_Worker]] = [None] * workers
        self._idle = list(range(workers))
        self._busy: Dict[int, _Worker] = {}
        self._closed = False
        self._inherited = False
        self._load_error: Optional[BaseException] = None
        _LIVE_RUNNERS.add(self)
        try:
            for index in range(workers):  # they boot in parallel; a call waits for its one
                self._slots[index] = _Worker(self._context, self._payload, index)
        except BaseException:
            self.close()
            raise

    @property
    def pids(self) -> List[int]:
        """The pids of the live worker processes (for tests and diagnostics)."""
        with self._cond:
            workers = [w for w in self._slots if w is not None] + list(self._busy.values())
        return [w.pid for w in workers]

    # --------------------------------------------------------------------------------- calls

    def _check(self) -> None:
        if self._inherited or os.getpid() != self._pid:
            raise LoaderClosedError(
                f"this python_workers pool belongs to process {self._pid} and was inherited "
                "through fork(): create the Loader again in this process")
        if self._closed:
            raise LoaderClosedError("the loader is closed")
        if self._load_error is not None:  # a fresh exception: several threads may raise it
            raise type(self._load_error)(str(self._load_error))

    def _acquire(self) -> Tuple[int, _Worker]:
        with self._cond:
            while True:
                self._check()
                if self._idle:
                    slot = self._idle.pop()
                    worker = self._slots[slot]
                    self._slots[slot] = None
                    break
                self._cond.wait()
        try:
            if worker is not None and worker.process.exitcode is not None:
                worker.dispose()  # died while idle (e.g. the OOM killer): replace it quietly
                worker = None
            if worker is None:
                worker = _Worker(self._context, self._payload, slot)
        except BaseException:
            self._release(slot, None)
            raise
        with self._cond:
            self._busy[slot] = worker
            if self._closed:
                del self._busy[slot]
                self._idle.append(slot)
                worker.dispose()
                self._check()
        return slot, worker

    def _release(self, slot: int, worker: Optional[_Worker]) -> None:
        with self._cond:
            self._busy.pop(slot, None)
            if worker is not None and self._closed:
                worker.dispose()
                worker = None
            self._slots[slot] = worker
            self._idle.append(slot)
            self._cond.notify()

    def call(self, name: str, arrays: Arrays, where: str,
             rng_key: Optional[Tuple[int, ...]] = None) -> Arrays:
        if name not in self._names:
            raise KeyError(name)
        slot, worker = self._acquire()
        healthy = False
        try:
            result = self._run(worker, name, arrays, where, rng_key)
            healthy = True
            return result
        except TransformError as error:
            # A user error leaves the worker ready for the next call; a crash does not.
            healthy = not isinstance(error, WorkerCrashedError)
            raise
        finally:
            if not healthy:
                worker.dispose()
            self._release(slot, worker if healthy else None)

    def _died(self, worker: _Worker, name: str, where: str) -> BaseException:
        if self._closed or self._inherited:
            return LoaderClosedError("the loader is closed")
        return WorkerCrashedError(
            f"{where}: the python_workers process (pid {worker.pid}) running {name}= died "
            f"({worker.exit_reason()}); it is replaced for later calls. A worker dies when it is "
            "killed (e.g. out of memory) or crashes in native code")

    def _wait_ready(self, worker: _Worker, name: str, where: str) -> None:
        try:
            message = worker.receive()
        except _Died:
            if self._closed or self._inherited:
                raise LoaderClosedError("the loader is closed") from None
            # Dying before it could serve is not about one batch: it would happen every time.
            self._load_error = WorkerCrashedError(
                f"{where}: the python_workers process (pid {worker.pid}) exited before it was "
                f"ready ({worker.exit_reason()}; its error is on stderr). A script that creates "
                "a Loader with python_workers must start it under `if __name__ == '__main__':`, "
                "since spawned workers import the script again")
            raise self._load_error from None
        if message[0] == "failed":
            self._load_error = InvalidOptionError(
                f"python_workers={self._workers}: a worker process could not load "
                f"{', '.join(n + '=' for n in self._names)} (define it in an importable module; "
                f"the worker's error follows)\n{message[1]}")
            raise self._load_error
        worker.ready = True

    def _run(self, worker: _Worker, name: str, arrays: Arrays, where: str,
             rng_key: Optional[Tuple[int, ...]]) -> Arrays:
        if not worker.ready:
            self._wait_ready(worker, name, where)
        specs, needed = _layout(arrays)
        worker.inputs.ensure(needed)
        descriptors = _write(specs, worker.inputs.shm.buf if needed else None)
        del specs
        key = None if rng_key is None else tuple(int(k) for k in rng_key)
        message = ("call", name, worker.inputs.spec, worker.outputs.spec, descriptors, key)
        try:
            worker.conn.send(message)
        except (OSError, ValueError):
            raise self._died(worker, name, where) from None
        except Exception as error:  # pickling an input failed: nothing was sent
            raise TransformError(
                f"{where}: an input of {name}= cannot be sent to a python_workers process: "
                f"{type(error).__name__}: {error}") from error
        try:
            while True:
                reply = worker.receive()
                if reply[0] != "grow":
                    break
                worker.outputs.ensure(reply[1])
                worker.conn.send(("arena", worker.outputs.spec))
        except (_Died, OSError):
            raise self._died(worker, name, where) from None
        kind = reply[0]
        if kind == "ok":
            buf = worker.outputs.shm.buf if worker.outputs.shm is not None else None
            in_buf = worker.inputs.shm.buf if worker.inputs.shm is not None else None
            out = _read(reply[1], buf, copy=True, in_buf=in_buf)
            del buf, in_buf
            return out
        if kind == "raised":
            _, type_name, text, trace = reply
            raise TransformError(f"{where}: {name}= raised {type_name}: {text}\n\n"
                                 f"Traceback in the python_workers process (pid {worker.pid}):\n"
                                 f"{trace.rstrip()}")
        if kind == "not_a_dict":
            raise TransformError(
                f"{where}: {name}= must return a dict of arrays, got {reply[1]}")
        raise TransformError(
            f"{where}: {name}= returned a value that cannot be sent back from the python_workers "
            f"process: {reply[1]}")

    # ----------------------------------------------------------------------------- lifecycle

    def close(self, grace: float = 1.0) -> None:
        """Stops every worker (a stop message, then SIGTERM and SIGKILL after ``grace``
        seconds) and unlinks every segment. A call in flight raises LoaderClosedError."""
        if self._inherited or os.getpid() != self._pid:
            self._closed = True  # the parent's processes and segments: not this process's
            return
        with self._cond:
            if self._closed:
                return
            self._closed = True
            idle = [w for w in self._slots if w is not None]
            self._slots = [None] * self._workers
            busy = list(self._busy.values())
            self._cond.notify_all()
        for worker in idle:
            if worker.ready:
                worker.stop()
            else:  # still booting (or never used): nothing to finish, no need to wait
                worker.kill()
        deadline = time.monotonic() + grace
        for worker in idle:
            worker.process.join(max(0.0, deadline - time.monotonic()))
        for worker in idle + busy:
            if worker.process.exitcode is None:
                try:
                    worker.process.terminate()
                except (OSError, ValueError):
                    pass
        deadline = time.monotonic() + 0.5
        for worker in idle + busy:
            try:
                worker.process.join(max(0.0, deadline - time.monotonic()))
            except (AssertionError, ValueError):
                pass
            worker.kill()
            with self._cond:  # a busy worker's thread may be between calls on these
                worker.inputs.unlink()
                worker.outputs.unlink()
        for worker in idle:
            worker.dispose()
        # Busy workers are disposed of by the threads that hold them, once their call returns.

    def _forget_after_fork(self) -> None:
        self._inherited = True
        self._cond = threading.Condition()  # another thread may have held it at fork()
        workers = [w for w in self._slots if w is not None] + list(self._busy.values())
        for worker in workers:
            multiprocessing.process._children.discard(worker.process)

    def __del__(self) -> None:
        try:
            self.close(grace=0.2)
        except Exception:
            pass


def _close_all_at_exit() -> None:
    for runner in list(_LIVE_RUNNERS):
        runner.close(grace=0.2)


def _after_fork_in_child() -> None:
    # Otherwise multiprocessing's exit hook in a child of os.fork() would terminate and join the
    # parent's workers as if they were the child's.
    for runner in list(_LIVE_RUNNERS):
        runner._forget_after_fork()


atexit.register(_close_all_at_exit)
os.register_at_fork(after_in_child=_after_fork_in_child)


def _check_picklable(functions: Mapping[str, Callable[..., Any]], workers: int) -> None:
    main = sys.modules.get("__main__")
    for name, fn in functions.items():
        try:
            pickle.dumps(fn)
        except Exception as error:
            raise InvalidOptionError(
                f"python_workers={workers} needs {name}= to be picklable (a module-level function "
                f"or an instance of a module-level class; not a lambda or a nested function): "
                f"{type(error).__name__}: {error}") from None
        if getattr(fn, "__module__", None) == "__main__" and not getattr(main, "__file__", None):
            raise InvalidOptionError(
                f"python_workers={workers}: {name}= is defined in an interactive session (or "
                "python -c), which a spawned worker process cannot import; define it in a module "
                "and import it from there")


def check_python_options(python_workers: Any, start_method: Any) -> None:
    """Raises InvalidOptionError naming ``python_workers`` or ``python_start_method``."""
    if isinstance(python_workers, bool) or not isinstance(python_workers, int) or \
            python_workers < 0:
        raise InvalidOptionError(
            f"python_workers must be a non-negative integer, got {python_workers!r}")
    if start_method not in START_METHODS:
        raise InvalidOptionError(
            f"python_start_method must be 'spawn' or 'forkserver', got {start_method!r}"
            + (" ('fork' would copy the loader's running C++ threads' locks into the worker)"
               if start_method == "fork" else ""))


def make_runner(functions: Mapping[str, Callable[..., Any]], python_workers: int = 0,
                start_method: str = "spawn"):
    """``python_workers=0``: a :class:`ThreadRunner`; N > 0: a :class:`ProcessRunner` of N
    processes started with ``start_method`` ("spawn" or "forkserver"; never "fork": the parent
    runs C++ threads, and a forked child would inherit their locks mid-use)."""
    check_python_options(python_workers, start_method)
    if python_workers == 0:
        return ThreadRunner(functions)
    _check_picklable(functions, python_workers)
    if multiprocessing.current_process().daemon:
        raise InvalidOptionError(
            f"python_workers={python_workers} cannot start processes from a daemonic process "
            "(e.g. a torch DataLoader worker); use python_workers=0 there")
    return ProcessRunner(functions, python_workers, start_method)
