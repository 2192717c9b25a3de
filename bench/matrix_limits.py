"""The shape matrix's limits (issue 26): several decode readers and several in-memory gathers, each
producing the arrays stoker delivers, each checkable against the NumPy reference.

Decode readers (``READERS``) yield ``(rows, arrays)`` in file order, arrays in the canonical form of
``bench.matrix_shapes`` (dense ``[n, ...]``; a list as values + ``_offsets``), at ``threads``:

- ``pyarrow-rg``: ``ParquetFile.read_row_group(g, use_threads=True)`` per row group, in order;
- ``pyarrow-rg-pool``: row groups on a pool of ``threads`` threads (``use_threads=False`` each,
  converted on the same thread), delivered in order with a bounded look-ahead;
- ``pyarrow-table``: ``pq.read_table(file, use_threads=True)`` per file, converted per record batch;
- ``polars``: ``pl.read_parquet`` per file (``POLARS_MAX_THREADS``), Polars' own conversions
  (``to_numpy`` of a frame for stacked features, ``Enum`` physical codes for strings);
- ``duckdb``: ``read_parquet`` of all files streamed as Arrow record batches (``SET threads``).

Strings: the readers get the vocabulary (stoker builds it at open: the limit does not pay that);
a dictionary-encoded chunk maps its dictionary once and takes the ids by its indices. Images:
the JPEG decode of each row into ``[n, H, W, 3]`` uint8 (Pillow, or OpenCV for ``+cv2``), on the
reader's pool of ``threads`` threads.

In-memory gathers (``GATHERS``) over the whole dataset's arrays as stoker delivers them (a padded
list as ``[N, longest]`` + lengths, a ragged list as values + offsets), batches by a seeded
permutation, ``threads`` threads:

- ``split-take-fresh``: the bench's ``memory_limit``: each batch split across the threads, fresh
  output arrays per batch, ``np.take``;
- ``batch-take``: each thread gathers whole batches with ``np.take(out=)`` into reused buffers;
- ``batch-take-sorted``: the same with each batch's indices sorted (the batch holds the same rows);
- ``batch-torch-sorted``: ``torch.index_select(out=)`` (one intra-op thread per call), whole batches,
  sorted, reused buffers;
- ``batch-copy-loop``: a plain per-row copy loop (``out[k] = a[i]``), whole batches, sorted, reused
  buffers; only where the dataset has at most ``COPY_LOOP_MAX`` row-arrays (it is a Python loop);
- ``window-take`` / ``window-torch``: ``np.take(out=)`` / ``torch.index_select(out=)``, whole
  batches, reused buffers, in stoker's windowed order (``window_order``: rows permuted inside
  windows of whole row groups, as the planner does), so each batch touches a window's rows, as
  stoker's do, not the whole dataset's; a ragged list by ``_ragged_take_lean``.

Libraries a reader would import on its first call (pandas, through pyarrow's ``to_numpy``) are
imported before the clock (``bench.matrix._preimport``), as is the vocabulary's Arrow form
(``Vocab``, made by ``read``).
"""

from __future__ import annotations

import collections
import io
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np

from . import matrix_shapes as ms

COPY_LOOP_MAX = 2_000_000


# ------------------------------------------------------------------------------ decoding

def _decode_pil(blob: bytes, out: np.ndarray) -> None:
    from PIL import Image

    img = Image.open(io.BytesIO(blob))
    out[...] = np.asarray(img.convert("RGB") if img.mode != "RGB" else img)


def _decode_cv2(blob: bytes, out: np.ndarray) -> None:
    import cv2

    out[...] = cv2.imdecode(np.frombuffer(blob, np.uint8), cv2.IMREAD_COLOR_RGB)


DECODERS = {"pil": _decode_pil, "cv2": _decode_cv2}


def _np(chunked) -> np.ndarray:
    import pyarrow as pa

    arr = chunked.combine_chunks() if isinstance(chunked, pa.ChunkedArray) else chunked
    return arr.to_numpy(zero_copy_only=False)


def _arr(col):
    import pyarrow as pa

    if isinstance(col, pa.ChunkedArray):
        return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    return col


class Converter:
    """Arrow columns -> the arrays stoker delivers (canonical form)."""

    def __init__(self, shape: ms.Shape, vocab: Dict[str, List[str]], decoder: str = "pil",
                 pool: Optional[ThreadPoolExecutor] = None, threads: int = 1):
        import pyarrow as pa

        self.shape = shape
        self.vocab = getattr(vocab, "arrow", None) or {n: pa.array(v, pa.string()) for n, v in vocab.items()}
        self.decode = DECODERS[decoder]
        self.pool = pool
        self.threads = threads
        self._lock = threading.Lock()
        self._ring: List[np.ndarray] = []
        self._next = 0

    def ids(self, name, col) -> np.ndarray:
        import pyarrow as pa
        import pyarrow.compute as pc

        col = _arr(col)
        vocab = self.vocab[name]
        if pa.types.is_dictionary(col.type):
            # The chunk's dictionary mapped once, then one take per row.
            mapped = pc.index_in(col.dictionary.cast(pa.string()), value_set=vocab)
            mapped = mapped.fill_null(-1).to_numpy().astype(np.int64) + 1
            return mapped[col.indices.to_numpy(zero_copy_only=False)]
        return pc.index_in(col, value_set=vocab).fill_null(-1).to_numpy().astype(np.int64) + 1

    def _image_buffer(self, n: int) -> np.ndarray:
        """Reused output buffers (fresh ones per row group are pages the kernel must zero):
        a ring longer than the batches a reader can have in flight plus the one delivered."""
        with self._lock:
            side = self.shape.extra["side"]
            if len(self._ring) < 2 * self.threads + 2:
                self._ring.append(np.empty((n, side, side, 3), np.uint8))
                buf = self._ring[-1]
            else:
                buf = self._ring[self._next % len(self._ring)]
                self._next += 1
            if len(buf) < n:
                buf = np.empty((n, side, side, 3), np.uint8)
            return buf[:n]

    def images(self, col) -> np.ndarray:
        blobs = _arr(col).to_pylist()
        out = self._image_buffer(len(blobs))
        if self.pool is None:
            for i, b in enumerate(blobs):
                self.decode(b, out[i])
        else:
            step = max(1, len(blobs) // (4 * self.threads))
            parts = [(lo, min(lo + step, len(blobs))) for lo in range(0, len(blobs), step)]

            def run(part):
                for i in range(*part):
                    self.decode(blobs[i], out[i])

            list(self.pool.map(run, parts))
        return out

    def __call__(self, table) -> Dict[str, np.ndarray]:
        import pyarrow.compute as pc

        d = self.shape.data_name
        names = table.column_names if hasattr(table, "column_names") else table.schema.names
        col = table.column
        if d == "wide":
            n = table.num_rows
            feats = np.empty((n, ms.WIDE_F), np.float32)
            for j in range(ms.WIDE_F):
                feats[:, j] = _np(col(f"f{j:03d}"))
            return {"features": feats, "label": _np(col("label"))}
        if d == "strings":
            return {n: (self.ids(n, col(n)) if n.startswith("s") else _np(col(n))) for n in names}
        if d == "tokens":
            arr = _arr(col("tokens"))
            offsets = arr.offsets.to_numpy().astype(np.int64)
            return {"tokens": pc.list_flatten(arr).to_numpy(), "tokens_offsets": offsets - offsets[0],
                    "label": _np(col("label"))}
        if d.startswith("images"):
            return {"image": self.images(col("image")), "label": _np(col("label"))}
        return {n: _np(col(n)) for n in names}


def _pyarrow_file(shape, path):
    import pyarrow.parquet as pq

    dictionary = [n for n in ms.read_columns(shape) if n.startswith("s")] \
        if shape.data_name == "strings" else None
    return pq.ParquetFile(path, read_dictionary=dictionary)


def read_pyarrow_rg(shape, paths, threads, vocab, decoder="pil"):
    with ThreadPoolExecutor(threads) as pool:
        conv = Converter(shape, vocab, decoder, pool, threads)
        for path in paths:
            pf = _pyarrow_file(shape, path)
            for g in range(pf.metadata.num_row_groups):
                table = pf.read_row_group(g, columns=ms.read_columns(shape), use_threads=True)
                yield table.num_rows, conv(table)
                del table


def read_pyarrow_rg_pool(shape, paths, threads, vocab, decoder="pil"):
    conv = Converter(shape, vocab, decoder, None, threads)
    columns = ms.read_columns(shape)

    def task(item):
        path, g = item
        table = _pyarrow_file(shape, path).read_row_group(g, columns=columns, use_threads=False)
        return table.num_rows, conv(table)

    items = [(p, g) for p in paths for g in range(_pyarrow_file(shape, p).metadata.num_row_groups)]
    ahead = collections.deque()
    with ThreadPoolExecutor(threads) as pool:
        it = iter(items)
        for item in it:
            ahead.append(pool.submit(task, item))
            if len(ahead) >= 2 * threads:
                break
        while ahead:
            result = ahead.popleft().result()
            nxt = next(it, None)
            if nxt is not None:
                ahead.append(pool.submit(task, nxt))
            yield result


def read_pyarrow_table(shape, paths, threads, vocab, decoder="pil"):
    import pyarrow.parquet as pq

    dictionary = [n for n in ms.read_columns(shape) if n.startswith("s")] \
        if shape.data_name == "strings" else None
    with ThreadPoolExecutor(threads) as pool:
        conv = Converter(shape, vocab, decoder, pool, threads)
        for path in paths:
            table = pq.read_table(path, columns=ms.read_columns(shape), use_threads=True,
                                  read_dictionary=dictionary)
            for rb in table.to_batches():
                yield rb.num_rows, conv(rb)
            del table


def read_polars(shape, paths, threads, vocab, decoder="pil"):
    os.environ.setdefault("POLARS_MAX_THREADS", str(threads))
    import polars as pl

    d = shape.data_name
    enums = {n: pl.Enum(v) for n, v in vocab.items()}
    with ThreadPoolExecutor(threads) as pool:
        conv = Converter(shape, vocab, decoder, pool, threads)
        for path in paths:
            df = pl.read_parquet(path, columns=ms.read_columns(shape))
            if d == "wide":
                out = {"features": df.select([f"f{j:03d}" for j in range(ms.WIDE_F)]).to_numpy(order="c"),
                       "label": df["label"].to_numpy()}
            elif d == "strings":
                out = {n: (df[n].cast(enums[n]).to_physical().to_numpy().astype(np.int64) + 1
                           if n in enums else df[n].to_numpy()) for n in df.columns}
            elif d in ("narrow", "many"):
                out = {n: df[n].to_numpy() for n in df.columns}
            else:
                out = conv(df.to_arrow())
            yield df.height, out
            del df


def read_duckdb(shape, paths, threads, vocab, decoder="pil"):
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads={int(threads)}")
    con.execute("SET preserve_insertion_order=true")
    cols = ", ".join(f'"{c}"' for c in ms.read_columns(shape))
    files = "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"
    reader = con.execute(f"SELECT {cols} FROM read_parquet({files})").fetch_record_batch(
        max(shape.row_group_rows, 1))
    with ThreadPoolExecutor(threads) as pool:
        conv = Converter(shape, vocab, decoder, pool, threads)
        for rb in reader:
            yield rb.num_rows, conv(rb)
    con.close()


_READ = {"pyarrow-rg": read_pyarrow_rg, "pyarrow-rg-pool": read_pyarrow_rg_pool,
         "pyarrow-table": read_pyarrow_table, "polars": read_polars, "duckdb": read_duckdb}


def readers(shape: ms.Shape) -> List[str]:
    """The decode readers tried for `shape` (a name may end in ``+decoder`` for images)."""
    if shape.data_name.startswith("images"):
        return ["pyarrow-rg+pil", "pyarrow-rg-pool+pil", "pyarrow-rg-pool+cv2", "polars+pil"]
    return ["pyarrow-rg", "pyarrow-rg-pool", "pyarrow-table", "polars", "duckdb"]


def reader_available(name: str) -> Optional[str]:
    base, _, decoder = name.partition("+")
    try:
        if base == "polars":
            import polars  # noqa: F401
        if base == "duckdb":
            import duckdb  # noqa: F401
        if decoder == "cv2":
            import cv2  # noqa: F401
    except ImportError as error:
        return f"not installed: {error}"
    return None


class Vocab(dict):
    """The vocabularies (name -> sorted values), with their Arrow arrays made once: `read` makes
    them before it returns, so before the clock (a reader is given the vocabulary)."""

    def __init__(self, vocab: Dict[str, List[str]]):
        import pyarrow as pa

        super().__init__(vocab)
        self.arrow = {n: pa.array(v, pa.string()) for n, v in vocab.items()}


def read(name: str, shape: ms.Shape, paths: List[str], threads: int, vocab) -> Iterator:
    base, _, decoder = name.partition("+")
    vocab = vocab if isinstance(vocab, Vocab) else Vocab(vocab)
    return _READ[base](shape, paths, threads, vocab, decoder or "pil")


# ------------------------------------------------------------------------------ in memory

def memory_arrays(canon: Dict[str, np.ndarray], shape: ms.Shape) -> Dict[str, np.ndarray]:
    """The whole dataset as stoker delivers it, for the gathers: a padded list becomes
    ``[N, longest]`` + ``_lengths``; a ragged list stays values + offsets."""
    out = dict(canon)
    if shape.lists == "padded":
        values, offsets = out.pop("tokens"), out.pop("tokens_offsets")
        lengths = np.diff(offsets)
        width = int(lengths.max()) if len(lengths) else 0
        padded = np.zeros((len(lengths), width), values.dtype)
        rows = np.repeat(np.arange(len(lengths)), lengths)
        padded[rows, np.arange(values.size) - np.repeat(offsets[:-1], lengths)] = values
        out["tokens"], out["tokens_lengths"] = padded, lengths
    return out


def _dense(arrays):
    return {n: a for n, a in arrays.items() if not n.endswith("_offsets") and f"{n}_offsets" not in arrays}


def _ragged(arrays):
    return [n for n in arrays if f"{n}_offsets" in arrays]


def _ragged_take(values, offsets, idx, out_values, torch_mode=False):
    lengths = offsets[idx + 1] - offsets[idx]
    new = np.zeros(len(idx) + 1, np.int64)
    np.cumsum(lengths, out=new[1:])
    total = int(new[-1])
    src = np.repeat(offsets[idx] - new[:-1], lengths) + np.arange(total)
    np.take(values, src, out=out_values[:total])
    return out_values[:total], new


_ARANGE: Dict[int, np.ndarray] = {}


def _ragged_take_lean(values, offsets, idx, out_values):
    """The vectorised ragged gather with one pass fewer: the source positions are the rows'
    starts repeated, plus a reused ``arange`` added in place, then one take."""
    starts = offsets[idx]
    lengths = offsets[idx + 1] - starts
    new = np.zeros(len(idx) + 1, np.int64)
    np.cumsum(lengths, out=new[1:])
    total = int(new[-1])
    ramp = _ARANGE.get(len(out_values))
    if ramp is None:
        ramp = _ARANGE.setdefault(len(out_values), np.arange(len(out_values), dtype=np.int64))
    src = np.repeat(starts - new[:-1], lengths)
    np.add(src, ramp[:total], out=src)
    np.take(values, src, out=out_values[:total])
    return out_values[:total], new


# A per-row copy loop compiled at first use (gcc through ctypes, which releases the GIL during the
# call): what a native gather does, without Python per row or per value. Unavailable (and left
# out of `gathers_for`) where no C compiler is found.
_C_SOURCE = r"""
#include <stdint.h>
#include <string.h>
void gather_rows(const char* src, int64_t w, const int64_t* idx, int64_t n, char* dst) {
  if (w == 8) {
    for (int64_t k = 0; k < n; ++k) memcpy(dst + 8 * k, src + 8 * idx[k], 8);
  } else if (w == 4) {
    for (int64_t k = 0; k < n; ++k) memcpy(dst + 4 * k, src + 4 * idx[k], 4);
  } else {
    for (int64_t k = 0; k < n; ++k) memcpy(dst + w * k, src + w * idx[k], (size_t)w);
  }
}
int64_t gather_ragged(const char* values, int64_t w, const int64_t* off, const int64_t* idx,
                      int64_t n, char* dst, int64_t* new_off) {
  int64_t pos = 0;
  new_off[0] = 0;
  for (int64_t k = 0; k < n; ++k) {
    int64_t lo = off[idx[k]], len = off[idx[k] + 1] - lo;
    memcpy(dst + w * pos, values + w * lo, (size_t)(w * len));
    pos += len;
    new_off[k + 1] = pos;
  }
  return pos;
}
"""
_C_LIB: list = []
_C_LOCK = threading.Lock()


def _c_lib():
    """The compiled gather (cached in the temp folder by the source's hash), or None."""
    with _C_LOCK:
        if not _C_LIB:
            _C_LIB.append(_c_build())
        return _C_LIB[0]


def _c_build():
    import ctypes
    import hashlib
    import shutil
    import subprocess
    import tempfile

    lib = None
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc:
        tag = hashlib.sha1(_C_SOURCE.encode()).hexdigest()[:12]
        so = os.path.join(tempfile.gettempdir(), f"stoker-bench-gather-{tag}-{os.getuid()}.so")
        try:
            if not os.path.exists(so):
                src = so[:-3] + f".{os.getpid()}.c"
                with open(src, "w") as f:
                    f.write(_C_SOURCE)
                tmp = so + f".{os.getpid()}"
                subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", tmp, src], check=True,
                               capture_output=True, timeout=60)
                os.replace(tmp, so)
                os.unlink(src)
            lib = ctypes.CDLL(so)
            p, i64 = ctypes.c_void_p, ctypes.c_int64
            lib.gather_rows.argtypes = [p, i64, p, i64, p]
            lib.gather_rows.restype = None
            lib.gather_ragged.argtypes = [p, i64, p, p, i64, p, p]
            lib.gather_ragged.restype = i64
        except (OSError, subprocess.SubprocessError):
            lib = None
    return lib


def _c_gather(arrays, idx, buf):
    lib = _c_lib()
    idx = np.ascontiguousarray(idx, np.int64)
    out = {}
    for n, a in _dense(arrays).items():
        o = buf[n][:len(idx)]
        lib.gather_rows(a.ctypes.data, a.strides[0], idx.ctypes.data, len(idx), o.ctypes.data)
        out[n] = o
    for n in _ragged(arrays):
        values, off = arrays[n], arrays[f"{n}_offsets"]
        new = np.empty(len(idx) + 1, np.int64)
        total = lib.gather_ragged(values.ctypes.data, values.itemsize, off.ctypes.data, idx.ctypes.data,
                                  len(idx), buf[n].ctypes.data, new.ctypes.data)
        out[n], out[f"{n}_offsets"] = buf[n][:total], new
    return out


def _ragged_loop(values, offsets, idx, out_values):
    new = np.zeros(len(idx) + 1, np.int64)
    pos = 0
    for k, i in enumerate(idx):
        lo, hi = offsets[i], offsets[i + 1]
        out_values[pos:pos + hi - lo] = values[lo:hi]
        pos += hi - lo
        new[k + 1] = pos
    return out_values[:pos], new


def _buffers(arrays, batch_size, count=1):
    """`count` sets of output buffers; a ragged one holds the `batch_size` longest rows (sized once:
    sorting every length per set cost ~10 ms each, inside the clock, of a 0.1 s epoch)."""
    most = {}
    for n in _ragged(arrays):
        lengths = np.diff(arrays[f"{n}_offsets"])
        k = min(batch_size, len(lengths))
        most[n] = int(np.partition(lengths, len(lengths) - k)[len(lengths) - k:].sum()) if k else 0
    sets = []
    for _ in range(count):
        out = {n: np.empty((batch_size,) + a.shape[1:], a.dtype) for n, a in _dense(arrays).items()}
        out.update({n: np.empty(m, arrays[n].dtype) for n, m in most.items()})
        sets.append(out)
    return sets


def _gather_into(kind, arrays, idx, buf):
    if kind == "window-c-memcpy":
        return _c_gather(arrays, idx, buf)
    out = {}
    dense = _dense(arrays)
    if kind in ("batch-torch-sorted", "window-torch"):
        import torch

        for n, a in dense.items():
            o = buf[n][:len(idx)]
            torch.index_select(torch.from_numpy(a), 0, torch.from_numpy(idx), out=torch.from_numpy(o))
            out[n] = o
    elif kind == "batch-copy-loop":
        for n, a in dense.items():
            o = buf[n]
            for k, i in enumerate(idx):
                o[k] = a[i]
            out[n] = o[:len(idx)]
    else:
        for n, a in dense.items():
            out[n] = np.take(a, idx, axis=0, out=buf[n][:len(idx)])
    for n in _ragged(arrays):
        fn = {"batch-copy-loop": _ragged_loop, "window-take": _ragged_take_lean,
              "window-torch": _ragged_take_lean}.get(kind, _ragged_take)
        out[n], out[f"{n}_offsets"] = fn(arrays[n], arrays[f"{n}_offsets"], idx, buf[n])
    return out


def row_groups(paths: List[str]) -> List[int]:
    """The rows of every row group, in file order (the window order's segments)."""
    import pyarrow.parquet as pq

    out = []
    for path in paths:
        md = pq.ParquetFile(path).metadata
        out += [md.row_group(g).num_rows for g in range(md.num_row_groups)]
    return out


def window_order(groups: List[int], batch_size: int, window: int, seed: int) -> np.ndarray:
    """A row order built as stoker's planner builds a shuffled epoch's (docs/user-guide.md, "How
    the order is built"), with NumPy's generator instead of Philox: row groups in a random order,
    the first one's first batch a segment of its own (the head), consecutive segments grouped into
    windows of whole segments until a window holds its target (one batch, doubling up to
    `window` rows), the rows of each window permuted. Every batch then reads rows of a few row
    groups, as stoker's do, not of the whole dataset."""
    rng = np.random.default_rng(seed)
    first = np.concatenate([[0], np.cumsum(groups)[:-1]]).astype(np.int64)
    segments = [(int(first[g]), int(groups[g])) for g in rng.permutation(len(groups))]
    if segments and segments[0][1] > batch_size:
        lo, n = segments[0]
        segments[0:1] = [(lo, batch_size), (lo + batch_size, n - batch_size)]
    parts, pending, held, target = [], [], 0, min(batch_size, window)
    for lo, n in segments:
        pending.append(np.arange(lo, lo + n, dtype=np.int64))
        held += n
        if held >= target:
            parts.append(rng.permutation(np.concatenate(pending)))
            pending, held, target = [], 0, min(2 * target, window)
    if pending:
        parts.append(rng.permutation(np.concatenate(pending)))
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


SHUFFLE_WINDOW = 65_536  # stoker's default shuffle_window (the matrix does not set it)


def gather(kind: str, arrays: Dict[str, np.ndarray], batch_size: int, threads: int, seed: int,
           with_index: bool = False, groups: Optional[List[int]] = None) -> Iterator[Tuple]:
    """One epoch of batches by a seeded permutation (the ``window-`` gathers: by `window_order`
    over the row groups `groups`, one group of all rows when not given); yields
    (rows, outputs[, index used])."""
    rows = len(next(iter(_dense(arrays).values())))
    if kind.startswith("window-"):
        order = window_order(groups or [rows], batch_size, SHUFFLE_WINDOW, seed)
    else:
        order = np.random.default_rng(seed).permutation(rows)
    starts = list(range(0, rows, batch_size))
    if kind in ("batch-torch-sorted", "window-torch"):
        import torch

        torch.set_num_threads(1)
    if kind == "split-take-fresh":
        pool = ThreadPoolExecutor(threads)
        try:
            for start in starts:
                idx = order[start:start + batch_size]
                dense = _dense(arrays)
                out = {n: np.empty((len(idx),) + a.shape[1:], a.dtype) for n, a in dense.items()}
                bounds = np.linspace(0, len(idx), threads + 1).astype(int)

                def part(p):
                    lo, hi = bounds[p], bounds[p + 1]
                    for n, a in dense.items():
                        np.take(a, idx[lo:hi], axis=0, out=out[n][lo:hi])

                list(pool.map(part, range(threads)))
                for n in _ragged(arrays):
                    values = np.empty(int(np.diff(arrays[f"{n}_offsets"])[idx].sum()), arrays[n].dtype)
                    out[n], out[f"{n}_offsets"] = _ragged_take(arrays[n], arrays[f"{n}_offsets"], idx, values)
                yield (len(idx), out, idx) if with_index else (len(idx), out)
        finally:
            pool.shutdown()
        return
    sort = kind.endswith("sorted") or kind == "batch-copy-loop"
    ring = threads + 1  # a batch's buffers are reused only after the consumer moved past it
    bufs = _buffers(arrays, batch_size, ring)

    def task(k):
        idx = order[starts[k]:starts[k] + batch_size]
        if sort:
            idx = np.sort(idx)
        return len(idx), _gather_into(kind, arrays, idx, bufs[k % ring]), idx

    pool = ThreadPoolExecutor(threads)
    try:
        ahead = collections.deque(pool.submit(task, k) for k in range(min(threads, len(starts))))
        k = len(ahead)
        while ahead:
            n, out, idx = ahead.popleft().result()
            if k < len(starts):
                ahead.append(pool.submit(task, k))
                k += 1
            yield (n, out, idx) if with_index else (n, out)
    finally:
        pool.shutdown()


GATHERS = ["split-take-fresh", "batch-take", "batch-take-sorted", "batch-torch-sorted",
           "window-take", "window-torch", "window-c-memcpy", "batch-copy-loop"]


def gathers_for(arrays: Dict[str, np.ndarray]) -> List[str]:
    rows = len(next(iter(_dense(arrays).values())))
    out = list(GATHERS)
    if rows * len(arrays) > COPY_LOOP_MAX:
        out.remove("batch-copy-loop")
    if _c_lib() is None or not all(a.flags.c_contiguous for a in arrays.values()):
        out.remove("window-c-memcpy")
    return out


# ------------------------------------------------------------------------------ checking

def same(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def check_reader(name, shape, paths, threads, vocab, ref) -> Tuple[bool, str]:
    """Runs reader `name` once; every batch must equal the reference's rows, values and dtypes."""
    at = 0
    try:
        for n, out in read(name, shape, paths, threads, vocab):
            for key, value in out.items():
                if key.endswith("_offsets"):
                    continue
                if f"{key}_offsets" in ref:
                    off = ref[f"{key}_offsets"]
                    want = ref[key][off[at]:off[at + n]]
                    if not same(out[f"{key}_offsets"], off[at:at + n + 1] - off[at]):
                        return False, f"{key}_offsets differ at row {at}"
                else:
                    want = ref[key][at:at + n]
                if not same(value, want):
                    return False, f"{key} differs in rows {at}-{at + n} ({np.asarray(value).dtype} vs {want.dtype})"
            at += n
    except Exception as error:  # noqa: BLE001
        return False, f"{type(error).__name__}: {error}"
    if at != len(ref[shape.count if shape.count in ref else next(iter(ref))]):
        return False, f"{at} rows read"
    return True, "values equal to the reference"


def check_gather(kind, arrays, batch_size, threads, seed, batches=3,
                 groups: Optional[List[int]] = None) -> Tuple[bool, str]:
    """The first batches of gather `kind` against fancy indexing of the same arrays (and, for a
    ``window-`` gather, that its order is a permutation of all rows)."""
    try:
        if kind.startswith("window-"):
            rows = len(next(iter(_dense(arrays).values())))
            order = window_order(groups or [rows], batch_size, SHUFFLE_WINDOW, seed)
            if not np.array_equal(np.sort(order), np.arange(rows)):
                return False, "the window order is not a permutation of the rows"
        for b, (n, out, idx) in enumerate(gather(kind, arrays, batch_size, threads, seed, with_index=True,
                                                 groups=groups)):
            for key, a in _dense(arrays).items():
                if not same(out[key], a[idx]):
                    return False, f"{key} differs in batch {b}"
            for key in _ragged(arrays):
                off = arrays[f"{key}_offsets"]
                want = np.concatenate([arrays[key][off[i]:off[i + 1]] for i in idx])
                if not same(out[key], want):
                    return False, f"{key} differs in batch {b}"
            if b + 1 >= batches:
                break
    except Exception as error:  # noqa: BLE001
        return False, f"{type(error).__name__}: {error}"
    return True, "values equal to the reference"
