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
- ``duckdb``: ``read_parquet`` of all files streamed as Arrow record batches (``SET threads``);
- ``pyarrow-rg-pool-memo`` (strings only; compared with the loader's later cold epoch only):
  ``pyarrow-rg-pool-warm`` keeping each dictionary's ids from its untimed pass, by the dictionary's
  bytes, as the loader keeps them for its later epochs;
- ``pyarrow-rg-pool-warm``: ``pyarrow-rg-pool`` after one whole untimed pass in the same process
  (``read`` drains it before it returns, so before the clock): the allocator's pages are faulted
  in and its blocks sized, as they are for a reader's later epochs. A cold stoker epoch is a
  fresh process's first; this limit does not pay a fresh process's costs, so it is the stronger
  one where those costs dominate (lists: Arrow grows their buffers through copies and fresh
  pages, which stoker's pool avoids);
- ``parquet-cpp`` (narrow, wide, many: every column read a top-level int32, int64, float or double,
  ``FIXED_WIDTH``): the loader's own way for such columns, Parquet's column reader
  (``TypedColumnReader::ReadBatch``) straight into the numpy outputs, in C++ against pyarrow's
  libparquet and libarrow (compiled at first use, called through ctypes: one call per row group,
  the GIL released), row groups on ``threads`` threads as ``pyarrow-rg-pool``; the wide set's
  features decoded 1,024 rows of each column at a time and transposed into the ``[n, 300]`` rows
  while in cache; output buffers reused once the consumer dropped them (``_Outputs``); a null is
  an error, not a value. ``parquet-cpp-warm``: the same after one untimed pass, its buffers kept.

Not a decode reader but timed as one (``floors``): ``parquet-cpp-shuffled``, the shuffled floor of
narrow, wide and many: ``parquet-cpp-warm``'s decode with the rows shuffled as the loader's shuffle
demands (row groups in a random order, windows of at least ``shuffle_window`` rows, each window's
rows uniformly permuted and gathered into the batches, in C; ``read_parquet_cpp_shuffled``),
checked by ``check_shuffled`` (every row once, inside its window, permuted; the batch sizes).

Strings: the readers get the vocabulary (stoker builds it at open: the limit does not pay that);
a dictionary-encoded chunk maps its dictionary once and takes the ids by its indices. Images:
the JPEG decode of each row into ``[n, H, W, 3]`` uint8 (Pillow, OpenCV for ``+cv2``, or for ``+tj``
libjpeg-turbo's TurboJPEG API over a range of rows in C, straight from the Arrow column), on the
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
  stoker's do, not the whole dataset's; a ragged list by ``_ragged_take_lean``;
- ``window-c-memcpy``: a per-row ``memcpy`` loop in C (``ctypes``, GIL released), one call per
  column, in the windowed order;
- ``window-c-columns`` / ``window-c-narrow`` / ``window-c-packed``: the windowed order, every
  column of a batch in one C call, from an input laid out for the work before the clock
  (``prepare``): stoker's own layout and dtypes / each integer column in its narrowest integer
  type, widened in the gather / those narrowed columns packed row by row; a padded list from its
  values + offsets to the batch's longest row (as stoker's ``PaddedWriter``), not from the padded
  matrix; the output buffers allocated and written once before the clock (a warm stoker epoch
  reuses the slabs of the epochs before it).

The rule for a memory limit's input (issue 26: a limit that stoker beats by more than 10% is a
weak limit, not a result): it may be prepared before the clock in whatever layout the limit likes
(narrower types, rows packed, lists unpadded, buffers made), as long as it is derived from the
same data (here the arrays a decode reader delivers from the Parquet files) and every batch the
limit delivers equals the reference (``check_gather``: fancy indexing of the arrays stoker
delivers; a padded list may be padded to the batch's longest row, as stoker pads it, with only
padding cut). What it may not do is skip work stoker does per batch: every output row is gathered
in the epoch's order into arrays of the delivered dtypes and shapes.

Libraries a reader would import on its first call (pandas, through pyarrow's ``to_numpy``) are
imported before the clock (``bench.matrix._preimport``), as is the vocabulary's Arrow form
(``Vocab``, made by ``read``).
"""

from __future__ import annotations

import collections
import functools
import hashlib
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

# libjpeg-turbo's TurboJPEG API called from C over a range of rows (``+tj``): the library stoker
# decodes with, no Python per image (Pillow and OpenCV pay a call, a bytes object and a copy per
# row, most of a 64x64 image's cost), straight from the Arrow binary column into the output, with
# the GIL released (ctypes). Compiled at first use like the C gathers; unavailable without a C
# compiler or turbojpeg.h.
_TJ_SOURCE = r"""
#include <stdint.h>
#include <turbojpeg.h>
/* Rows [lo, hi) of a binary column (int32 offsets) decoded as RGB into out's rows [lo, hi) of
   height x width x 3 bytes; returns the first row that failed, or hi. */
int64_t tj_decode_rows(const unsigned char* data, const int32_t* offsets, int64_t lo, int64_t hi,
                       unsigned char* out, int64_t height, int64_t width) {
  tjhandle handle = tjInitDecompress();
  if (!handle) return lo;
  int64_t i = lo;
  for (; i < hi; ++i) {
    if (tjDecompress2(handle, data + offsets[i], (unsigned long)(offsets[i + 1] - offsets[i]),
                      out + i * height * width * 3, (int)width, 0, (int)height, TJPF_RGB,
                      0) != 0) {
      break;
    }
  }
  tjDestroy(handle);
  return i;
}
"""
_TJ_LIB: list = []


def _tj_lib():
    """The compiled TurboJPEG range decoder (cached in the temp folder by its source's hash), or
    None."""
    with _C_LOCK:
        if not _TJ_LIB:
            lib = _compile(_TJ_SOURCE, "tj", ["-lturbojpeg"])
            if lib is not None:
                import ctypes

                p, i64 = ctypes.c_void_p, ctypes.c_int64
                lib.tj_decode_rows.argtypes = [p, p, i64, i64, p, i64, i64]
                lib.tj_decode_rows.restype = i64
            _TJ_LIB.append(lib)
        return _TJ_LIB[0]


def _decode_tj_rows(arr, lo: int, hi: int, out: np.ndarray) -> None:
    """Rows [lo, hi) of the binary array `arr` into out[lo:hi] ([n, H, W, 3] uint8, C order)."""
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], np.int32)[arr.offset:arr.offset + len(arr) + 1]
    done = _tj_lib().tj_decode_rows(buffers[2].address, offsets.ctypes.data, lo, hi,
                                    out.ctypes.data, out.shape[1], out.shape[2])
    if done != hi:
        raise ValueError(f"TurboJPEG could not decode row {done}")


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
        self.memo = getattr(vocab, "memo", None)
        self.decoder = decoder
        self.decode = DECODERS.get(decoder)
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
            # The chunk's dictionary mapped once, then one take per row; with a memo (a later
            # pass, as stoker keeps a row group's dictionary ids for its later epochs) a
            # dictionary whose bytes were mapped before is not mapped again.
            key = None
            if self.memo is not None:
                key = (name, *(bytes(b) if b is not None else b"" for b in col.dictionary.buffers()))
                mapped = self.memo.get(key)
                if mapped is not None:
                    return mapped[col.indices.to_numpy(zero_copy_only=False)]
            mapped = pc.index_in(col.dictionary.cast(pa.string()), value_set=vocab)
            mapped = mapped.fill_null(-1).to_numpy().astype(np.int64) + 1
            if key is not None:
                with self._lock:
                    self.memo[key] = mapped
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
        if self.decoder == "tj":  # no Python objects per image: rows in parts, in C
            arr = _arr(col)
            out = self._image_buffer(len(arr))
            if self.pool is None:
                _decode_tj_rows(arr, 0, len(arr), out)
            else:
                step = max(1, len(arr) // (4 * self.threads))
                parts = [(lo, min(lo + step, len(arr))) for lo in range(0, len(arr), step)]
                list(self.pool.map(lambda part: _decode_tj_rows(arr, *part, out), parts))
            return out
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
    yield from _ordered(task, items, threads)


def _ordered(task, items, threads):
    """task(item) for every item on a pool of `threads` threads, at most 2 * threads ahead of the
    consumer, the results in the items' order."""
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


# ``parquet-cpp``: the loader's own way of decoding fixed-width columns without nulls (Parquet's
# column reader, ``TypedColumnReader::ReadBatch``, straight into one buffer: no Arrow arrays,
# no validity bitmaps, no record reader), in C++ against pyarrow's own libparquet and libarrow,
# compiled at first use like the C gathers and called through ctypes (the GIL released), one call
# per row group into the numpy outputs. The definition levels are decoded and counted, as the
# loader does: a null is an error (the outputs have no mask), never a wrong value.
_PQ_SOURCE = r"""
#include <arrow/io/file.h>
#include <parquet/column_reader.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>
#include <ctime>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace {

// pq_read's results (named on the Python side, _PQ_ERRORS).
enum : int64_t { kOk = 0, kNull = 1, kShort = 2, kType = 3, kError = 4 };
constexpr int64_t kLevels = 64 << 10;  // definition levels per ReadBatch of a 1-D output

struct File {
  // One mapping shared by the threads (ReadAt on it is thread-safe): a row group's chunks come
  // from the page cache without a copy, and no open per call.
  std::shared_ptr<arrow::io::MemoryMappedFile> map;
  std::shared_ptr<parquet::FileMetaData> metadata;  // the footer, parsed once
};

// Row group g of f, with the file reader it reads through (parsed footer, shared mapping).
struct RowGroup {
  std::unique_ptr<parquet::ParquetFileReader> reader;
  std::shared_ptr<parquet::RowGroupReader> rg;
};

RowGroup OpenRowGroup(const File& f, int64_t g) {
  RowGroup out;
  out.reader =
      parquet::ParquetFileReader::Open(f.map, parquet::default_reader_properties(), f.metadata);
  out.rg = out.reader->RowGroup(static_cast<int>(g));
  return out;
}

int64_t Fail(char* err, int64_t size, const std::string& what, int64_t code) {
  if (size > 0) {
    std::strncpy(err, what.c_str(), static_cast<size_t>(size - 1));
    err[size - 1] = 0;
  }
  return code;
}

// `rows` values of a leaf into `out`; kNull when the levels hold a null (fewer values than levels).
template <typename PT>
int64_t ReadInto(parquet::ColumnReader* column, int64_t rows, void* out, int16_t* levels) {
  auto* reader = static_cast<parquet::TypedColumnReader<PT>*>(column);
  auto* values = static_cast<typename PT::c_type*>(out);
  for (int64_t done = 0; done < rows;) {
    int64_t values_read = 0;
    const int64_t n = reader->ReadBatch(std::min(rows - done, kLevels), levels, nullptr,
                                        values + done, &values_read);
    if (n == 0) return kShort;
    if (values_read != n) return kNull;
    done += n;
  }
  return kOk;
}

// The numpy type code a top-level leaf is read as, as stored (q int64, i int32, f float32,
// d float64), or 0: repeated, nested, another type, or a logical type other than a signed
// integer of the physical width.
char TypeCode(const parquet::ColumnDescriptor& column) {
  if (column.max_repetition_level() != 0 || column.max_definition_level() > 1) return 0;
  const auto& logical = column.logical_type();
  const bool plain = !logical || logical->is_none();
  auto is_int = [&](int bits) {
    if (plain) return true;
    if (!logical->is_int()) return false;
    const auto& integer = static_cast<const parquet::IntLogicalType&>(*logical);
    return integer.bit_width() == bits && integer.is_signed();
  };
  switch (column.physical_type()) {
    case parquet::Type::INT64: return is_int(64) ? 'q' : 0;
    case parquet::Type::INT32: return is_int(32) ? 'i' : 0;
    case parquet::Type::FLOAT: return plain ? 'f' : 0;
    case parquet::Type::DOUBLE: return plain ? 'd' : 0;
    default: return 0;
  }
}

int64_t ReadLeaf(parquet::ColumnReader* column, char code, int64_t rows, void* out,
                 int16_t* levels) {
  if (code == 0 || TypeCode(*column->descr()) != code) return kType;
  switch (code) {
    case 'q': return ReadInto<parquet::Int64Type>(column, rows, out, levels);
    case 'i': return ReadInto<parquet::Int32Type>(column, rows, out, levels);
    case 'f': return ReadInto<parquet::FloatType>(column, rows, out, levels);
    default: return ReadInto<parquet::DoubleType>(column, rows, out, levels);
  }
}

// s [n columns][ld] (b rows each) -> out [b][n]: 4x4 tiles, 16 rows at a time, so that each
// column's line of 16 values stays in L1 for the four tiles that read it.
void Transpose(const float* s, int64_t n, int64_t b, int64_t ld, float* out) {
  int64_t r16 = 0;
#ifdef __SSE2__
  for (; r16 + 16 <= b; r16 += 16) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      const float* c = s + j * ld + r16;
      for (int64_t r = 0; r < 16; r += 4) {
        __m128 x0 = _mm_loadu_ps(c + r), x1 = _mm_loadu_ps(c + ld + r);
        __m128 x2 = _mm_loadu_ps(c + 2 * ld + r), x3 = _mm_loadu_ps(c + 3 * ld + r);
        _MM_TRANSPOSE4_PS(x0, x1, x2, x3);
        float* o = out + (r16 + r) * n + j;
        _mm_storeu_ps(o, x0);
        _mm_storeu_ps(o + n, x1);
        _mm_storeu_ps(o + 2 * n, x2);
        _mm_storeu_ps(o + 3 * n, x3);
      }
    }
    for (; j < n; ++j) {
      for (int64_t r = r16; r < r16 + 16; ++r) out[r * n + j] = s[j * ld + r];
    }
  }
#endif
  for (int64_t r = r16; r < b; ++r) {
    for (int64_t j = 0; j < n; ++j) out[r * n + j] = s[j * ld + r];
  }
}

// The same through a tile of 16 whole rows in L1, streamed out with non-temporal stores: those
// rows are contiguous in out, so whole lines are written without being read first (the output
// is larger than the caches). 8% less CPU than the tiles stored in place.
void TransposeStream(const float* s, int64_t n, int64_t b, int64_t ld, float* out) {
  int64_t r16 = 0;
#ifdef __SSE2__
  thread_local std::vector<float> tile;
  tile.resize(16 * n);
  const bool aligned = reinterpret_cast<uintptr_t>(out) % 16 == 0 && n % 4 == 0;
  for (; aligned && r16 + 16 <= b; r16 += 16) {
    Transpose(s + r16, n, 16, ld, tile.data());
    float* o = out + r16 * n;
    for (int64_t k = 0; k < 16 * n; k += 4) _mm_stream_ps(o + k, _mm_loadu_ps(tile.data() + k));
  }
  _mm_sfence();
#endif
  Transpose(s + r16, n, b - r16, ld, out + r16 * n);
}

// n float leaves stacked into out [rows][n]: every leaf's reader open, `block` rows of each in
// turn decoded into a scratch [n][block] that stays in cache, then transposed into out's rows.
int64_t ReadStacked(parquet::RowGroupReader& rg, int64_t n, const int32_t* leaves, int64_t rows,
                    int64_t block, float* out, int16_t* levels, int64_t* failed) {
  std::vector<std::shared_ptr<parquet::ColumnReader>> columns(n);
  for (int64_t j = 0; j < n; ++j) {
    columns[j] = rg.Column(leaves[j]);
    if (TypeCode(*columns[j]->descr()) != 'f') {
      *failed = leaves[j];
      return kType;
    }
  }
  const int64_t ld = block + 16;  // not a power of two: the leaves' lines in different sets
  thread_local std::vector<float> scratch;
  scratch.resize(n * ld);
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t b = std::min(block, rows - r0);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t rc =
          ReadInto<parquet::FloatType>(columns[j].get(), b, scratch.data() + j * ld, levels);
      if (rc != kOk) {
        *failed = leaves[j];
        return rc;
      }
    }
    TransposeStream(scratch.data(), n, b, ld, out + r0 * n);
  }
  return kOk;
}

// Rows [0, b) of n scratch columns (column j at s + j * ld * 8, w[j] = 4 or 8 bytes a value)
// packed into out's rows (row_bytes each, column j's value at off[j]), 64 rows at a time through
// a tile in L1 streamed out with non-temporal stores (the rows are contiguous in out).
void PackRows(const char* s, int64_t n, const int64_t* w, const int64_t* off, int64_t ld, int64_t b,
              int64_t row_bytes, char* out) {
  constexpr int64_t kTile = 64;
  thread_local std::vector<char> store;
  store.resize(kTile * row_bytes + 64);
  char* tile = store.data() + (64 - reinterpret_cast<uintptr_t>(store.data()) % 64) % 64;
  bool stream = false;
#ifdef __SSE2__
  stream = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
#endif
  for (int64_t r0 = 0; r0 < b; r0 += kTile) {
    const int64_t m = std::min(kTile, b - r0);
    char* t = stream ? tile : out + r0 * row_bytes;
    for (int64_t j = 0; j < n; ++j) {
      const char* c = s + j * ld * 8 + r0 * w[j];
      char* d = t + off[j];
      if (w[j] == 8) {
        for (int64_t r = 0; r < m; ++r) std::memcpy(d + r * row_bytes, c + 8 * r, 8);
      } else {
        for (int64_t r = 0; r < m; ++r) std::memcpy(d + r * row_bytes, c + 4 * r, 4);
      }
    }
#ifdef __SSE2__
    if (stream) {
      char* o = out + r0 * row_bytes;
      for (int64_t k = 0; k < m * row_bytes; k += 16) {
        _mm_stream_si128(reinterpret_cast<__m128i*>(o + k),
                         _mm_load_si128(reinterpret_cast<const __m128i*>(tile + k)));
      }
    }
#endif
  }
#ifdef __SSE2__
  if (stream) _mm_sfence();
#endif
}

double ThreadSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

extern "C" {

// Row group g (`rows` rows): the n leaves (type codes[k], 4 or 8 bytes) decoded `block` rows at a
// time into a scratch that stays in cache, each block's rows then packed into out's rows
// (row_bytes each, leaf k's value at off[k]): the shuffled floor's window, one row in one or a
// few cache lines. seconds, when not null, gets the thread CPU seconds of the decoding
// (seconds[0]) and of the packing (seconds[1]) added.
int64_t pq_read_packed(void* file, int64_t g, int64_t rows, int64_t n, const int32_t* leaves,
                       const char* codes, const int64_t* off, int64_t row_bytes, int64_t block,
                       char* out, double* seconds, char* err, int64_t size) {
  try {
    const RowGroup opened = OpenRowGroup(*static_cast<File*>(file), g);
    const auto& rg = opened.rg;
    if (rg->metadata()->num_rows() != rows) {
      return Fail(err, size, "the row group's rows are not the outputs'", kError);
    }
    std::vector<std::shared_ptr<parquet::ColumnReader>> columns(n);
    std::vector<int64_t> w(n);
    for (int64_t j = 0; j < n; ++j) {
      columns[j] = rg->Column(leaves[j]);
      if (codes[j] == 0 || TypeCode(*columns[j]->descr()) != codes[j]) {
        return Fail(err, size, "leaf " + std::to_string(leaves[j]), kType);
      }
      w[j] = codes[j] == 'q' || codes[j] == 'd' ? 8 : 4;
    }
    thread_local std::vector<int16_t> levels(kLevels);
    const int64_t ld = block + 16;
    thread_local std::vector<char> scratch;
    scratch.resize(n * ld * 8);
    for (int64_t r0 = 0; r0 < rows; r0 += block) {
      const int64_t b = std::min(block, rows - r0);
      const double t0 = seconds ? ThreadSeconds() : 0;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t rc = ReadLeaf(columns[j].get(), codes[j], b, scratch.data() + j * ld * 8,
                                    levels.data());
        if (rc != kOk) return Fail(err, size, "leaf " + std::to_string(leaves[j]), rc);
      }
      const double t1 = seconds ? ThreadSeconds() : 0;
      PackRows(scratch.data(), n, w.data(), off, ld, b, row_bytes, out + r0 * row_bytes);
      if (seconds) {
        const double t2 = ThreadSeconds();
        seconds[0] += t1 - t0;
        seconds[1] += t2 - t1;
      }
    }
    return kOk;
  } catch (const std::exception& e) {
    return Fail(err, size, e.what(), kError);
  }
}


void* pq_open(const char* path, char* err, int64_t size) {
  try {
    auto map = arrow::io::MemoryMappedFile::Open(path, arrow::io::FileMode::READ);
    if (!map.ok()) {
      Fail(err, size, map.status().ToString(), kError);
      return nullptr;
    }
    auto metadata = parquet::ParquetFileReader::Open(*map)->metadata();
    return new File{std::move(map).ValueUnsafe(), std::move(metadata)};
  } catch (const std::exception& e) {
    Fail(err, size, e.what(), kError);
    return nullptr;
  }
}

void pq_close(void* file) { delete static_cast<File*>(file); }

int64_t pq_row_groups(void* file) { return static_cast<File*>(file)->metadata->num_row_groups(); }

int64_t pq_rows(void* file, int64_t g) {
  return static_cast<File*>(file)->metadata->RowGroup(static_cast<int>(g))->num_rows();
}

// The leaf of a top-level column, or -1.
int64_t pq_leaf(void* file, const char* name) {
  return static_cast<File*>(file)->metadata->schema()->ColumnIndex(std::string(name));
}

// The numpy type code the leaf is read as (TypeCode), or 0.
int64_t pq_type(void* file, int64_t leaf) {
  return TypeCode(*static_cast<File*>(file)->metadata->schema()->Column(static_cast<int>(leaf)));
}

// Row group g (`rows` rows): leaves[k] into the 1-D outs[k] (type codes[k]) and the nf float
// leaves feature_leaves stacked into features [rows][nf], `block` rows at a time. A result
// other than kOk names the leaf ("leaf 12") in err, or, for kError, says what failed.
int64_t pq_read(void* file, int64_t g, int64_t rows, int64_t n, const int32_t* leaves,
                const char* codes, void* const* outs, int64_t nf, const int32_t* feature_leaves,
                float* features, int64_t block, char* err, int64_t size) {
  try {
    const RowGroup opened = OpenRowGroup(*static_cast<File*>(file), g);
    const auto& rg = opened.rg;
    if (rg->metadata()->num_rows() != rows) {
      return Fail(err, size, "the row group's rows are not the outputs'", kError);
    }
    thread_local std::vector<int16_t> levels(kLevels);
    int64_t failed = -1;
    int64_t rc = kOk;
    if (nf > 0) {
      rc = ReadStacked(*rg, nf, feature_leaves, rows, block, features, levels.data(), &failed);
    }
    for (int64_t k = 0; rc == kOk && k < n; ++k) {
      rc = ReadLeaf(rg->Column(leaves[k]).get(), codes[k], rows, outs[k], levels.data());
      if (rc != kOk) failed = leaves[k];
    }
    return rc == kOk ? kOk : Fail(err, size, "leaf " + std::to_string(failed), rc);
  } catch (const std::exception& e) {
    return Fail(err, size, e.what(), kError);
  }
}

}  // extern "C"
"""
_PQ_LIB: list = []
_PQ_ERRORS = {1: "holds a null (the outputs have no mask)", 2: "holds fewer values than its rows",
              3: "is not a top-level column of the output's type"}
_PQ_TYPES = {"q": np.int64, "i": np.int32, "f": np.float32, "d": np.float64}  # TypeCode's codes
# Rows of each stacked leaf decoded per turn: 1,024 x 300 floats stay in L2/L3. 256 rows cost
# 10% more CPU (ReadBatch's cost per call), whole leaves then a transpose 10% more (through
# memory twice).
_PQ_BLOCK = 1024


def _pq_lib():
    """The compiled Parquet column reader (linked to pyarrow's libparquet and libarrow), or None."""
    with _C_LOCK:
        if not _PQ_LIB:
            _PQ_LIB.append(_pq_build())
        return _PQ_LIB[0]


def _pq_build():
    import ctypes
    import glob

    import pyarrow as pa  # loads the libarrow and libparquet the reader links: one copy of each

    where = pa.get_library_dirs()[0]
    libs = []
    for stem in ("parquet", "arrow"):  # the versioned names (libarrow.so.2600), no dev links
        found = sorted(glob.glob(os.path.join(where, f"lib{stem}.so.[0-9]*")), key=len)
        if not found:
            return None
        libs.append(f"-l:{os.path.basename(found[0])}")
    lib = _compile(_PQ_SOURCE, "parquet-cpp",
                   [f"-I{pa.get_include()}", f"-L{where}", *libs, f"-Wl,-rpath,{where}"], cxx=True)
    if lib is not None:
        p, i64 = ctypes.c_void_p, ctypes.c_int64
        read = [p, i64, i64, i64, p, p, p, i64, p, p, i64, p, i64]
        for fn, args, res in (("pq_open", [ctypes.c_char_p, p, i64], p), ("pq_close", [p], None),
                              ("pq_row_groups", [p], i64), ("pq_rows", [p, i64], i64),
                              ("pq_leaf", [p, ctypes.c_char_p], i64), ("pq_type", [p, i64], i64),
                              ("pq_read", read, i64),
                              ("pq_read_packed", [p, i64, i64, i64, p, p, p, i64, i64, p, p, p, i64],
                               i64)):
            getattr(lib, fn).argtypes, getattr(lib, fn).restype = args, res
    return lib


class _PqFile:
    """A Parquet file opened by the C++ reader: mapped, its footer parsed once."""

    def __init__(self, lib, path: str):
        import ctypes

        self.lib, self.path = lib, path
        err = ctypes.create_string_buffer(256)
        self.handle = lib.pq_open(path.encode(), err, len(err))
        if not self.handle:
            raise OSError(f"{path}: {err.value.decode(errors='replace')}")
        self.row_groups = lib.pq_row_groups(self.handle)

    def leaves(self, names: List[str]) -> Tuple[np.ndarray, str]:
        """The leaf index and the type code (`_PQ_TYPES`) of each of the top-level columns
        `names`."""
        leaves = np.array([self.lib.pq_leaf(self.handle, n.encode()) for n in names], np.int32)
        codes = "".join(chr(self.lib.pq_type(self.handle, int(leaf))) if leaf >= 0 else "\0"
                        for leaf in leaves)
        for name, code in zip(names, codes):
            if code not in _PQ_TYPES:
                raise ValueError(f"{self.path}: column {name} is not a top-level int32, int64, "
                                 "float or double column")
        return leaves, codes

    def read(self, g: int, rows: int, outs: List[np.ndarray], features: Optional[np.ndarray],
             plan: "_PqPlan") -> None:
        """Row group `g` into `outs` (plan.columns' order) and `features` (or None)."""
        import ctypes

        ptrs = (ctypes.c_void_p * max(len(outs), 1))(*(o.ctypes.data for o in outs))
        err = ctypes.create_string_buffer(256)
        rc = self.lib.pq_read(self.handle, g, rows, len(outs), plan.leaves.ctypes.data,
                              plan.codes.encode(), ptrs, plan.width,
                              plan.feature_leaves.ctypes.data,
                              None if features is None else features.ctypes.data, _PQ_BLOCK,
                              err, len(err))
        if rc:
            what = err.value.decode(errors="replace")
            if what.startswith("leaf "):
                what = f"column {plan.name_of.get(int(what[5:]), what)} {_PQ_ERRORS.get(rc, rc)}"
            raise ValueError(f"{self.path}, row group {g}: {what}")

    def read_packed(self, g: int, rows: int, plan: "_PqPlan", out: np.ndarray, off: np.ndarray,
                    seconds=None) -> None:
        """Row group `g` into the rows of `out` ([rows, row bytes] uint8), plan.columns' values
        at the byte offsets `off` (``pq_read_packed``); `seconds` (ctypes double[2]) gets the
        decoding's and the packing's thread CPU seconds added."""
        import ctypes

        err = ctypes.create_string_buffer(256)
        rc = self.lib.pq_read_packed(self.handle, g, rows, len(plan.columns), plan.leaves.ctypes.data,
                                     plan.codes.encode(), off.ctypes.data, out.shape[1], _PQ_BLOCK,
                                     out.ctypes.data, seconds, err, len(err))
        if rc:
            what = err.value.decode(errors="replace")
            if what.startswith("leaf "):
                what = f"column {plan.name_of.get(int(what[5:]), what)} {_PQ_ERRORS.get(rc, rc)}"
            raise ValueError(f"{self.path}, row group {g}: {what}")

    def close(self) -> None:
        if self.handle:
            self.lib.pq_close(self.handle)
            self.handle = None


class _PqPlan:
    """Which leaves go where for one file: the 1-D outputs' and, for the wide shape, the stacked
    features'."""

    def __init__(self, shape: ms.Shape, f: _PqFile):
        columns = ms.read_columns(shape)
        stacked = [c for c in columns if c.startswith("f")] if shape.data_name == "wide" else []
        self.columns = [c for c in columns if c not in stacked]
        self.leaves, self.codes = f.leaves(self.columns)
        self.feature_leaves, codes = f.leaves(stacked)
        if codes.strip("f"):
            raise ValueError(f"{f.path}: stacked features must be float columns")
        self.width = len(stacked)
        self.name_of = dict(zip(map(int, self.leaves), self.columns))
        self.name_of.update(zip(map(int, self.feature_leaves), stacked))


class _Outputs:
    """Output arrays reused across row groups (fresh ones are pages the kernel faults in and
    zeroes inside the clock: 18 MB per row group of the wide set). Every array handed out is a
    view of a pooled buffer, and a view, or anything made from it (``np.asarray``,
    ``torch.from_numpy``), holds a reference to that buffer: a buffer is handed out again only
    when nothing but the pool refers to it, so a batch the consumer keeps (``check_reader`` holds
    one while the next is read) is never overwritten; the pool grows instead."""

    def __init__(self):
        self._buffers: List[np.ndarray] = []
        self._lock = threading.Lock()

    def take(self, rows: int, dtype, width: int = 0) -> np.ndarray:
        import sys

        shape = (rows, width) if width else (rows,)
        with self._lock:
            for i in range(len(self._buffers)):
                # Two references when free: the list's and getrefcount's argument.
                if sys.getrefcount(self._buffers[i]) <= 2:
                    buf = self._buffers[i]
                    if buf.dtype == dtype and buf.shape[1:] == shape[1:] and len(buf) >= rows:
                        return buf[:rows]
            self._buffers.append(np.empty(shape, dtype))
            return self._buffers[-1][:rows]


def read_parquet_cpp(shape, paths, threads, vocab, decoder="pil", outputs=None):
    """The fixed-width shapes (narrow, wide, many): row groups on a pool of `threads` threads, in
    order (`_ordered`, as ``pyarrow-rg-pool``), each one C++ call (`_PQ_SOURCE`) into arrays from
    `outputs` (a ``-warm`` read passes the pool of its untimed pass)."""
    lib = _pq_lib()
    outputs = outputs if outputs is not None else _Outputs()
    files = []
    try:
        files = [_PqFile(lib, p) for p in paths]  # footers inside the clock, as the loader's open
        plans = {f.path: _PqPlan(shape, f) for f in files}

        def task(item):
            f, g = item
            plan = plans[f.path]
            rows = lib.pq_rows(f.handle, g)
            outs = [outputs.take(rows, _PQ_TYPES[c]) for c in plan.codes]
            features = outputs.take(rows, np.float32, plan.width) if plan.width else None
            f.read(g, rows, outs, features, plan)
            arrays = dict(zip(plan.columns, outs))
            return rows, (arrays if features is None else {"features": features, **arrays})

        yield from _ordered(task, [(f, g) for f in files for g in range(f.row_groups)], threads)
    finally:
        for f in files:  # after _ordered's pool has finished every task
            f.close()


# ``parquet-cpp-shuffled``: the shuffled floor of the fixed-width shapes, not a decode limit. The
# same decode as ``parquet-cpp`` (its C++ reader, files, footers, one untimed pass first with its
# buffers kept), then the rows shuffled as the loader's shuffle must: the row groups in a random
# order, consecutive ones grouped into windows of at least ``shuffle_window`` rows (full windows
# from the first: the loader's smaller windows at the epoch's start are left out, which only makes
# this cheaper), a uniformly random permutation of each window's rows (Fisher-Yates with wyrand,
# in C: ``shuffle_perm``), and the window's rows gathered in that order into batches of
# ``batch_size`` rows in the delivered layout (in C, the source rows prefetched ahead). A batch
# may span two windows, as the loader's do: every batch holds ``batch_size`` rows but the epoch's
# last. What the unshuffled reader never does: a permutation and a random gather of every value,
# from a window decoded whole before any of its rows is delivered.
# The gathers, measured here (CPU ms per epoch of the default sets, 2-3 runs each):
# - narrow (a window is one 262,144-row group, 7.3 MB of columns, in the last level cache):
#   per-column gathers (``gather_perm``) 44-57, one row at a time over the four columns
#   (``_SHUFFLE_FUSED``) 86-87, the rows packed first (``pq_read_packed``) 56-62 plus 14-17 to pack;
# - many (a window is two 50,000-row groups, 28.8 MB: each value of a per-column gather a line
#   from memory): per-column 120-137, row at a time 371-439, packed 55-63 plus 15-17 to pack
#   (each row's 48 values in 5 lines; decoded 1,024 rows a column at a time into a scratch in
#   cache, packed there and streamed out with non-temporal stores: no pass through memory more);
# - wide: the features' rows are packed already (``[n, 300]``): each a 1,200-byte copy, 24-30;
#   prefetching 4, 8 or 16 rows ahead or none: the same.
# So the rows are packed where a window's columns are more than ``_SHUFFLE_PACK_ABOVE`` bytes
# (half of this machine's 16 MB L3), gathered per column otherwise.
_SHUFFLE_FUSED = 0
_SHUFFLE_PACK_ABOVE = 8 << 20
# Rows of the source prefetched ahead of the gather: for 4- and 8-byte values, and for a wide
# row (every line of the row). Narrow's per-column gathers, CPU ms per epoch (2 runs each): 64
# rows ahead 54-55, 16 or 32 70-75, 128 or 256 56-64, none 67-70.
_SHUFFLE_AHEAD, _SHUFFLE_AHEAD_WIDE = 64, 8
# Gathers queued ahead of the consumer, per thread.
_SHUFFLE_PARTS = 4
_PERM = "\0perm"  # a window's permutation, kept with its arrays
_ROWS = "\0rows"  # a window's packed rows


def shuffle_windows(groups: List[int], window: int, seed: int) -> Tuple[List[List[int]], List[int]]:
    """The shuffled floor's plan for row groups of `groups` rows (file order): the row groups'
    indices in a random order, cut into windows of consecutive ones holding at least `window`
    rows (the last may hold fewer), and a seed for each window's permutation."""
    rng = np.random.default_rng(seed)
    windows, pending, held = [], [], 0
    for g in rng.permutation(len(groups)):
        pending.append(int(g))
        held += groups[g]
        if held >= window:
            windows.append(pending)
            pending, held = [], 0
    if pending:
        windows.append(pending)
    seeds = [int(s) for s in rng.integers(0, 1 << 62, len(windows))]
    return windows, seeds


class _SetPool:
    """Sets of arrays (a window's arrays and permutation, a batch's outputs) reused whole, as
    ``_Outputs`` reuses arrays: a set is handed out again only when nothing but the pool refers
    to any of its arrays (a view, or anything made from one, holds its array). One scan of the
    sets per take, not of every array: ``_Outputs`` scanning the thousands of arrays of the many
    set's batches in flight (48 a batch) cost more CPU than the gathers."""

    def __init__(self):
        self._sets: List[Tuple[tuple, int, Dict[str, np.ndarray], np.ndarray]] = []

    def take(self, rows: int, specs: tuple) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
        """A set of `rows` rows of each (name, dtype, width) in `specs` (width 0: 1-D), and the
        arrays' addresses in the specs' order."""
        import sys

        for kind, size, arrays, addresses in self._sets:
            # Two references when free: the set's and getrefcount's argument.
            if kind == specs and size >= rows and all(sys.getrefcount(arrays[n]) <= 2 for n in arrays):
                return {n: a[:rows] for n, a in arrays.items()}, addresses
        arrays = {n: np.empty((rows, w) if w else (rows,), t) for n, t, w in specs}
        addresses = np.array([a.ctypes.data for a in arrays.values()], np.int64)
        self._sets.append((specs, rows, arrays, addresses))
        return {n: a[:rows] for n, a in arrays.items()}, addresses


class _ShuffleBuffers:
    """``parquet-cpp-shuffled``'s reused buffers: the decoded windows with their permutations,
    and the delivered batches, kept from the untimed pass to the timed one."""

    def __init__(self):
        self.windows = _SetPool()
        self.batches = _SetPool()


def read_parquet_cpp_shuffled(shape, paths, threads, vocab, decoder="pil", outputs=None, seed=7,
                              window=None, stats=None, fused=None, packed=None):
    """One shuffled epoch of the fixed-width shapes (see the comment above ``_SHUFFLE_FUSED``):
    yields (rows, batch) with batches of ``shape.batch_size`` rows in the epoch's order. On a pool
    of `threads` threads, tasks taken in the order they are queued: each row group of a window
    decoded by one task (``pq_read`` into the window's columns, or ``pq_read_packed`` into its
    packed rows, at the row group's place in the window), the window's permutation by another,
    then each part of the window that falls in one batch gathered by one task, which waits for
    those (queued before it, so already taken by a thread).
    The queue: window 0's and window 1's decodes, window 0's gathers, window 2's decodes, window
    1's gathers, ...: a window decodes while the one before it is gathered, as in a loader; at
    most ``_SHUFFLE_PARTS`` x `threads` gathers queued ahead of the consumer (the batches they
    fill are the ones in flight). `packed` (None: by the window's size, ``_SHUFFLE_PACK_ABOVE``)
    and `fused` choose the gather. `stats` (a dict), when given, gets each stage's thread CPU
    seconds (``decode``, ``pack`` where packed, ``permutation``, ``gather``)."""
    import time

    lib, clib = _pq_lib(), _c_lib()
    bufs = outputs if outputs is not None else _ShuffleBuffers()
    window = window or SHUFFLE_WINDOW
    fused = _SHUFFLE_FUSED if fused is None else fused
    batch = shape.batch_size
    lock = threading.Lock()

    def count(stage, start):
        if stats is not None:
            spent = time.thread_time() - start
            with lock:
                stats[stage] = stats.get(stage, 0.0) + spent

    files: List[_PqFile] = []
    pool = None
    try:
        files = [_PqFile(lib, p) for p in paths]  # footers inside the clock, as parquet-cpp
        plans = {f.path: _PqPlan(shape, f) for f in files}
        items = [(f, g, lib.pq_rows(f.handle, g)) for f in files for g in range(f.row_groups)]
        first = plans[files[0].path]
        specs = ((("features", np.dtype(np.float32), first.width),) if first.width else ()) + tuple(
            (c, np.dtype(_PQ_TYPES[code]), 0) for c, code in zip(first.columns, first.codes))
        names = [n for n, _, _ in specs]
        widths = np.array([t.itemsize * max(w, 1) for _, t, w in specs], np.int64)
        ahead = _SHUFFLE_AHEAD if widths.max(initial=8) <= 8 else _SHUFFLE_AHEAD_WIDE
        windows, seeds = shuffle_windows([rows for _, _, rows in items], window, seed)
        total = sum(rows for _, _, rows in items)
        starts = np.concatenate([[0], np.cumsum([sum(items[g][2] for g in w) for w in windows])])
        starts = [int(x) for x in starts]
        if packed is None:  # rows packed where a window's columns do not fit in the cache
            packed = max(np.diff(starts), default=0) * int(widths.sum()) > _SHUFFLE_PACK_ABOVE
        packed = packed and not first.width  # the wide set's features: rows already
        if packed:  # the window's rows packed: the widest columns first, rows of 16-byte multiples
            row_off = np.zeros(len(names), np.int64)
            at = 0
            for j in sorted(range(len(names)), key=lambda j: -int(widths[j])):
                row_off[j], at = at, at + int(widths[j])
            row_bytes = (at + 15) // 16 * 16
            window_specs = ((_ROWS, np.dtype(np.uint8), row_bytes), (_PERM, np.dtype(np.uint32), 0))
            if any(plans[f.path].codes != first.codes for f in files):
                raise ValueError("the files' columns differ in type")
        else:
            window_specs = specs + ((_PERM, np.dtype(np.uint32), 0),)

        def decode(item, arrays, lo):
            f, g, rows = item
            plan = plans[f.path]
            if packed:
                import ctypes

                seconds = (ctypes.c_double * 2)() if stats is not None else None
                start = time.thread_time()
                f.read_packed(g, rows, plan, arrays[_ROWS][lo:lo + rows], row_off, seconds)
                if seconds is not None:  # the call's time outside both counted as decoding
                    spent = time.thread_time() - start
                    with lock:
                        stats["decode"] = stats.get("decode", 0.0) + spent - seconds[1]
                        stats["pack"] = stats.get("pack", 0.0) + seconds[1]
                return
            outs = [arrays[c][lo:lo + rows] for c in plan.columns]
            features = arrays["features"][lo:lo + rows] if plan.width else None
            start = time.thread_time()
            f.read(g, rows, outs, features, plan)
            count("decode", start)

        def permute(s, perm):
            start = time.thread_time()
            clib.shuffle_perm(s, len(perm), perm.ctypes.data)
            count("permutation", start)

        def gather(deps, srcs, perm, n, dsts):
            for d in deps:
                d.result()
            start = time.thread_time()
            if packed:
                clib.gather_packed_perm(int(srcs[0]), row_bytes, len(names), row_off.ctypes.data,
                                        widths.ctypes.data, perm, n, dsts.ctypes.data, ahead)
            else:
                clib.gather_perm(len(names), srcs.ctypes.data, widths.ctypes.data, perm, n,
                                 dsts.ctypes.data, fused, ahead)
            count("gather", start)

        state: Dict[int, tuple] = {}  # window -> (its arrays, their addresses, its decode tasks)
        open_batches: Dict[int, Tuple[Dict[str, np.ndarray], np.ndarray]] = {}
        pending: collections.deque = collections.deque()  # (gather, batch it ends, window's last)

        def submit_window(k):
            arrays, addresses = bufs.windows.take(starts[k + 1] - starts[k], window_specs)
            deps, lo = [], 0
            for g in windows[k]:
                deps.append(pool.submit(decode, items[g], arrays, lo))
                lo += items[g][2]
            deps.append(pool.submit(permute, seeds[k], arrays[_PERM]))
            srcs = addresses[:-1]  # the permutation's last
            state[k] = (arrays, srcs, deps)

        def submit_part(k, pos):
            """The gather of window k's rows from epoch position `pos` to the end of the window
            or of the batch; returns the position after them."""
            arrays, srcs, deps = state[k]
            b, off = divmod(pos, batch)
            size = min(batch, total - b * batch)
            n = min(starts[k + 1] - pos, size - off)
            if b not in open_batches:
                open_batches[b] = bufs.batches.take(size, specs)
            dsts = open_batches[b][1] + off * widths
            perm = arrays[_PERM].ctypes.data + 4 * (pos - starts[k])
            task = pool.submit(gather, deps, srcs, perm, n, dsts)
            pending.append((task, b if off + n == size else None,
                            k if pos + n == starts[k + 1] else None))
            return pos + n

        def queue():
            """The queue's order, one submission at a time (window 0's decodes, then window 1's,
            window 0's gathers, window 2's decodes, ...)."""
            if windows:
                yield submit_window, 0
            for k in range(len(windows)):
                if k + 1 < len(windows):
                    yield submit_window, k + 1
                pos = starts[k]
                while pos < starts[k + 1]:
                    pos = yield submit_part, k, pos

        ops = queue()

        def submit(op):  # the next op after `op`, or None
            try:
                return ops.send(op[0](*op[1:]))
            except StopIteration:
                return None

        pool = ThreadPoolExecutor(threads)
        op = next(ops, None)
        cap = _SHUFFLE_PARTS * threads
        while op is not None or pending:
            while op is not None and (op[0] is submit_window or len(pending) < cap):
                op = submit(op)
            task, done, last = pending.popleft()
            task.result()
            if last is not None:
                del state[last]  # its arrays free for a later window
            if done is not None:
                out = open_batches.pop(done)[0]
                yield len(out[names[-1]]), out
                del out
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        for f in files:
            f.close()


_READ = {"pyarrow-rg": read_pyarrow_rg, "pyarrow-rg-pool": read_pyarrow_rg_pool,
         "pyarrow-table": read_pyarrow_table, "polars": read_polars, "duckdb": read_duckdb,
         "parquet-cpp": read_parquet_cpp}
# The shapes whose read columns are all top-level fixed-width numbers (``parquet-cpp``'s).
FIXED_WIDTH = ("narrow", "wide", "many")


def readers(shape: ms.Shape) -> List[str]:
    """The decode readers tried for `shape` (a name may end in ``+decoder`` for images)."""
    if shape.data_name.startswith("images"):
        return ["pyarrow-rg+pil", "pyarrow-rg-pool+pil", "pyarrow-rg-pool+cv2", "pyarrow-rg-pool+tj",
                "polars+pil"]
    names = ["pyarrow-rg", "pyarrow-rg-pool", "pyarrow-rg-pool-warm", "pyarrow-table", "polars",
             "duckdb"]
    if shape.data_name == "strings":
        names.append("pyarrow-rg-pool-memo")  # a limit for later epochs only (LATER_ONLY)
    if shape.data_name in FIXED_WIDTH:
        names += ["parquet-cpp", "parquet-cpp-warm"]
    return names


# Readers that model a later epoch of a reader, not a first one: the matrix compares only the
# loader's later cold epoch with them.
LATER_ONLY = ("pyarrow-rg-pool-memo",)

# The shuffled floor (``read_parquet_cpp_shuffled``): timed and checked like a decode reader, but
# never a decode limit (it does more than the unshuffled readers: it is slower by construction).
SHUFFLED = "parquet-cpp-shuffled"


def floors(shape: ms.Shape) -> List[str]:
    """The shuffled readers measured for `shape` (reported beside the decode limit, not in it)."""
    return [SHUFFLED] if shape.data_name in FIXED_WIDTH else []


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
    if decoder == "tj" and _tj_lib() is None:
        return "no C compiler, turbojpeg.h or libturbojpeg to build the TurboJPEG decoder"
    if base.startswith("parquet-cpp") and _pq_lib() is None:
        return ("no C++20 compiler, or pyarrow's Parquet headers or libparquet/libarrow, to build "
                "the Parquet column reader")
    if base == SHUFFLED and _c_lib() is None:
        return "no C compiler to build the permutation and the gather"
    return None


class Vocab(dict):
    """The vocabularies (name -> sorted values), with their Arrow arrays made once: `read` makes
    them before it returns, so before the clock (a reader is given the vocabulary)."""

    def __init__(self, vocab: Dict[str, List[str]]):
        import pyarrow as pa

        super().__init__(vocab)
        self.arrow = {n: pa.array(v, pa.string()) for n, v in vocab.items()}
        # (column, dictionary bytes) -> the dictionary's ids, kept across passes (``-memo``).
        self.memo: Optional[dict] = None


def read(name: str, shape: ms.Shape, paths: List[str], threads: int, vocab, seed: int = 7,
         window: Optional[int] = None) -> Iterator:
    """Reader `name`'s epoch (its untimed pass first for a ``-warm`` one, here, before the
    caller's clock); `seed` and `window` (the rows of a shuffle window) are the shuffled
    floor's."""
    base, _, decoder = name.partition("+")
    vocab = vocab if isinstance(vocab, Vocab) else Vocab(vocab)
    if base == SHUFFLED:  # one untimed epoch first (another order), its buffers kept, as -warm
        fn = functools.partial(read_parquet_cpp_shuffled, outputs=_ShuffleBuffers(), window=window)
        for _ in fn(shape, paths, threads, vocab, seed=seed + 1):
            pass
        return fn(shape, paths, threads, vocab, seed=seed)
    if base.endswith("-memo"):
        vocab.memo = {}
        base = base[: -len("-memo")] + "-warm"
    warm = base.endswith("-warm")
    base = base[: -len("-warm")] if warm else base
    fn = _READ[base]
    if base == "parquet-cpp":  # its output buffers, kept from the untimed pass to the timed one
        fn = functools.partial(fn, outputs=_Outputs())
    if warm:
        for _ in fn(shape, paths, threads, vocab, decoder or "pil"):
            pass  # the untimed pass: here, before the caller's clock starts
    return fn(shape, paths, threads, vocab, decoder or "pil")


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

/* The layout-prepared gathers (GATHERS' "window-c-*"): a whole batch of every column in one call.
   A column's source may be narrower than its output (ids stored as uint8/uint16, widened here:
   sgn says sign- or zero-extension); a packed row holds every column of a row at off[j]. */
#define WIDEN(S, D) for (int64_t k = 0; k < n; ++k) ((D*)dst)[k] = (D)((const S*)src)[idx[k]]
static void gather_col(const char* src, int64_t sw, int64_t sgn, int64_t dw, const int64_t* idx,
                       int64_t n, char* dst) {
  if (sw == dw) {
    switch (sw) {
      case 8: WIDEN(uint64_t, uint64_t); return;
      case 4: WIDEN(uint32_t, uint32_t); return;
      case 2: WIDEN(uint16_t, uint16_t); return;
      case 1: WIDEN(uint8_t, uint8_t); return;
    }
    for (int64_t k = 0; k < n; ++k) memcpy(dst + sw * k, src + sw * idx[k], (size_t)sw);
    return;
  }
  if (dw == 8 && sgn) {
    switch (sw) {
      case 4: WIDEN(int32_t, int64_t); return;
      case 2: WIDEN(int16_t, int64_t); return;
      case 1: WIDEN(int8_t, int64_t); return;
    }
  } else if (dw == 8) {
    switch (sw) {
      case 4: WIDEN(uint32_t, uint64_t); return;
      case 2: WIDEN(uint16_t, uint64_t); return;
      case 1: WIDEN(uint8_t, uint64_t); return;
    }
  } else if (dw == 4 && sgn) {
    switch (sw) {
      case 2: WIDEN(int16_t, int32_t); return;
      case 1: WIDEN(int8_t, int32_t); return;
    }
  } else if (dw == 4) {
    switch (sw) {
      case 2: WIDEN(uint16_t, uint32_t); return;
      case 1: WIDEN(uint8_t, uint32_t); return;
    }
  }
}
#undef WIDEN

void gather_columns(int64_t ncols, const int64_t* srcs, const int64_t* sw, const int64_t* sgn,
                    const int64_t* dw, const int64_t* idx, int64_t n, const int64_t* dsts) {
  for (int64_t j = 0; j < ncols; ++j)
    gather_col((const char*)srcs[j], sw[j], sgn[j], dw[j], idx, n, (char*)dsts[j]);
}

#define PACKED(S, D)                                                                  \
  for (int64_t k = lo; k < hi; ++k)                                                   \
    ((D*)dsts[j])[k] = (D)(*(const S*)(src + idx[k] * row_bytes + off[j]))
void gather_packed(const char* src, int64_t row_bytes, int64_t ncols, const int64_t* off,
                   const int64_t* sw, const int64_t* sgn, const int64_t* dw, const int64_t* idx,
                   int64_t n, const int64_t* dsts) {
  enum { kBlock = 64 };  /* a block's rows stay in L1 while every column reads them */
  for (int64_t lo = 0; lo < n; lo += kBlock) {
    int64_t hi = lo + kBlock < n ? lo + kBlock : n;
    int64_t ahead = hi + kBlock < n ? hi + kBlock : n;
    for (int64_t k = hi; k < ahead; ++k)
      for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(src + idx[k] * row_bytes + b);
    for (int64_t j = 0; j < ncols; ++j) {
      int64_t code = sw[j] * 100 + dw[j] * 10 + sgn[j];
      switch (code) {
        case 880: case 881: PACKED(uint64_t, uint64_t); break;
        case 440: case 441: PACKED(uint32_t, uint32_t); break;
        case 220: case 221: PACKED(uint16_t, uint16_t); break;
        case 110: case 111: PACKED(uint8_t, uint8_t); break;
        case 480: PACKED(uint32_t, uint64_t); break;
        case 481: PACKED(int32_t, int64_t); break;
        case 280: PACKED(uint16_t, uint64_t); break;
        case 281: PACKED(int16_t, int64_t); break;
        case 180: PACKED(uint8_t, uint64_t); break;
        case 181: PACKED(int8_t, int64_t); break;
        case 240: PACKED(uint16_t, uint32_t); break;
        case 241: PACKED(int16_t, int32_t); break;
        case 140: PACKED(uint8_t, uint32_t); break;
        case 141: PACKED(int8_t, int32_t); break;
        default:
          for (int64_t k = lo; k < hi; ++k)
            memcpy((char*)dsts[j] + dw[j] * k, src + idx[k] * row_bytes + off[j], (size_t)dw[j]);
      }
    }
  }
}
#undef PACKED

/* A padded list from its values + offsets, as stoker's PaddedWriter: [n, longest of the batch],
   each row's values copied, the rest zeroed, the rows ahead prefetched. Returns the longest. */
int64_t gather_padded(const char* values, int64_t w, const int64_t* off, const int64_t* idx,
                      int64_t n, char* dst, int64_t* lengths) {
  int64_t longest = 0;
  for (int64_t k = 0; k < n; ++k) {
    lengths[k] = off[idx[k] + 1] - off[idx[k]];
    if (lengths[k] > longest) longest = lengths[k];
  }
  for (int64_t k = 0; k < n; ++k) {
    if (k + 8 < n) {
      const char* from = values + w * off[idx[k + 8]];
      const char* end = from + w * lengths[k + 8];
      for (const char* line = from; line < end; line += 64) __builtin_prefetch(line);
    }
    char* row = dst + w * longest * k;
    memcpy(row, values + w * off[idx[k]], (size_t)(w * lengths[k]));
    memset(row + w * lengths[k], 0, (size_t)(w * (longest - lengths[k])));
  }
  return longest;
}

/* ``parquet-cpp-shuffled``: a window's permutation and its gather into the batches. */

/* wyrand (Wang Yi's generator: one add and one 64x64->128 multiply a draw) */
static inline uint64_t wyrand(uint64_t* s) {
  *s += 0xa0761d6478bd642fULL;
  __uint128_t t = (__uint128_t)*s * (*s ^ 0xe7037ed1a0b428dbULL);
  return (uint64_t)(t >> 64) ^ (uint64_t)t;
}

/* Uniform in [0, range) without a bias: Lemire's multiply-shift, a draw rejected now and then. */
static inline uint32_t below(uint64_t* s, uint32_t range) {
  uint64_t m = (uint64_t)(uint32_t)wyrand(s) * range;
  uint32_t low = (uint32_t)m;
  if (low < range) {
    uint32_t floor = (uint32_t)(-range) % range;
    while (low < floor) {
      m = (uint64_t)(uint32_t)wyrand(s) * range;
      low = (uint32_t)m;
    }
  }
  return (uint32_t)(m >> 32);
}

/* perm[0..n) a uniformly random permutation of 0..n-1 (Fisher-Yates, the "inside-out" form:
   one pass, no initialisation). */
void shuffle_perm(uint64_t seed, int64_t n, uint32_t* perm) {
  uint64_t s = seed;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t j = below(&s, (uint32_t)i + 1);
    perm[i] = perm[j];
    perm[j] = (uint32_t)i;
  }
}

/* Rows perm[0..n) of each column j (srcs[j], w[j] bytes a row) into dsts[j]'s rows 0..n, the
   source rows `ahead` rows later prefetched (every line of a wide row). Per column: each column's
   loop alone (fused = 0), or every column of a row before the next row (fused = 1). */
#define PERM_COPY(T)                                                              \
  do {                                                                            \
    const T* from = (const T*)src;                                                \
    T* to = (T*)dst;                                                              \
    int64_t k = 0;                                                                \
    for (; k + ahead < n; ++k) {                                                  \
      __builtin_prefetch(from + perm[k + ahead]);                                 \
      to[k] = from[perm[k]];                                                      \
    }                                                                             \
    for (; k < n; ++k) to[k] = from[perm[k]];                                     \
  } while (0)
static void perm_column(const char* src, int64_t w, const uint32_t* perm, int64_t n, char* dst,
                        int64_t ahead) {
  if (w == 8) {
    PERM_COPY(uint64_t);
  } else if (w == 4) {
    PERM_COPY(uint32_t);
  } else {
    int64_t k = 0;
    for (; k < n; ++k) {
      if (k + ahead < n) {
        const char* row = src + w * (int64_t)perm[k + ahead];
        for (int64_t b = 0; b < w; b += 64) __builtin_prefetch(row + b);
      }
      memcpy(dst + w * k, src + w * (int64_t)perm[k], (size_t)w);
    }
  }
}
#undef PERM_COPY

/* Rows perm[0..n) of a packed window (row_bytes a row, column j's value of w[j] = 4 or 8 bytes
   at off[j]) into the columns dsts[j]: 64 rows at a time, every line of the rows `ahead` rows
   later prefetched, each column's values of the 64 rows (in L1 by then) copied in turn. */
#define PACKED_PERM(T)                                                            \
  do {                                                                            \
    T* to = (T*)dsts[j];                                                          \
    const char* from = src + off[j];                                              \
    for (int64_t k = lo; k < hi; ++k)                                             \
      to[k] = *(const T*)(from + (int64_t)perm[k] * row_bytes);                   \
  } while (0)
void gather_packed_perm(const char* src, int64_t row_bytes, int64_t ncols, const int64_t* off,
                        const int64_t* w, const uint32_t* perm, int64_t n, const int64_t* dsts,
                        int64_t ahead) {
  enum { kBlock = 64 };
  for (int64_t lo = 0; lo < n; lo += kBlock) {
    int64_t hi = lo + kBlock < n ? lo + kBlock : n;
    int64_t end = hi + ahead < n ? hi + ahead : n;
    for (int64_t k = lo + ahead; k < end; ++k) {
      const char* row = src + (int64_t)perm[k] * row_bytes;
      for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(row + b);
      __builtin_prefetch(row + row_bytes - 1);
    }
    for (int64_t j = 0; j < ncols; ++j) {
      if (w[j] == 8) {
        PACKED_PERM(uint64_t);
      } else {
        PACKED_PERM(uint32_t);
      }
    }
  }
}
#undef PACKED_PERM

void gather_perm(int64_t ncols, const int64_t* srcs, const int64_t* w, const uint32_t* perm,
                 int64_t n, const int64_t* dsts, int64_t fused, int64_t ahead) {
  if (!fused) {
    for (int64_t j = 0; j < ncols; ++j)
      perm_column((const char*)srcs[j], w[j], perm, n, (char*)dsts[j], ahead);
    return;
  }
  for (int64_t k = 0; k < n; ++k) {
    if (k + ahead < n) {
      const int64_t r = perm[k + ahead];
      for (int64_t j = 0; j < ncols; ++j) {
        const char* row = (const char*)srcs[j] + w[j] * r;
        for (int64_t b = 0; b < w[j]; b += 64) __builtin_prefetch(row + b);
      }
    }
    const int64_t r = perm[k];
    for (int64_t j = 0; j < ncols; ++j) {
      if (w[j] == 8) {
        ((uint64_t*)dsts[j])[k] = ((const uint64_t*)srcs[j])[r];
      } else if (w[j] == 4) {
        ((uint32_t*)dsts[j])[k] = ((const uint32_t*)srcs[j])[r];
      } else {
        memcpy((char*)dsts[j] + w[j] * k, (const char*)srcs[j] + w[j] * r, (size_t)w[j]);
      }
    }
  }
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


def _compile(source: str, name: str, libs=(), cxx: bool = False):
    """`source` built as a shared library (cached in the temp folder by its hash and, for C++,
    its flags: they name the pyarrow it links) and loaded, or None without a C (C++) compiler or
    when it does not build."""
    import ctypes
    import hashlib
    import shutil
    import subprocess
    import tempfile

    if cxx:  # Arrow 23+ headers need C++20 (std::span); pyarrow's wheels use the new C++ ABI
        cc, flags, ext = shutil.which("g++") or shutil.which("c++"), ["-std=c++20"], ".cc"
    else:
        cc, flags, ext = shutil.which("cc") or shutil.which("gcc"), [], ".c"
    if not cc:
        return None
    tag = hashlib.sha1((source + (" ".join(libs) if cxx else "")).encode()).hexdigest()[:12]
    so = os.path.join(tempfile.gettempdir(), f"stoker-bench-{name}-{tag}-{os.getuid()}.so")
    try:
        if not os.path.exists(so):
            src = so[:-3] + f".{os.getpid()}{ext}"
            with open(src, "w") as f:
                f.write(source)
            tmp = so + f".{os.getpid()}"
            try:
                subprocess.run([cc, *flags, "-O2", "-shared", "-fPIC", "-o", tmp, src, *libs],
                               check=True, capture_output=True, timeout=120)
            finally:
                os.unlink(src)
            os.replace(tmp, so)
        return ctypes.CDLL(so)
    except (OSError, subprocess.SubprocessError):
        return None


def _c_build():
    import ctypes

    lib = _compile(_C_SOURCE, "gather")
    if lib is not None:
        p, i64 = ctypes.c_void_p, ctypes.c_int64
        lib.gather_rows.argtypes = [p, i64, p, i64, p]
        lib.gather_rows.restype = None
        lib.gather_ragged.argtypes = [p, i64, p, p, i64, p, p]
        lib.gather_ragged.restype = i64
        lib.gather_columns.argtypes = [i64, p, p, p, p, p, i64, p]
        lib.gather_columns.restype = None
        lib.gather_packed.argtypes = [p, i64, i64, p, p, p, p, p, i64, p]
        lib.gather_packed.restype = None
        lib.gather_padded.argtypes = [p, i64, p, p, i64, p, p]
        lib.gather_padded.restype = i64
        lib.shuffle_perm.argtypes = [ctypes.c_uint64, i64, p]
        lib.shuffle_perm.restype = None
        lib.gather_perm.argtypes = [i64, p, p, p, i64, p, i64, i64]
        lib.gather_perm.restype = None
        lib.gather_packed_perm.argtypes = [p, i64, i64, p, p, p, i64, p, i64]
        lib.gather_packed_perm.restype = None
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


# ------------------------------------------------------------ layout-prepared native gathers

# The gathers whose input is laid out before the clock (`prepare`) as a plain program would lay
# it out for this work, and whose whole batch is one native call (GIL released):
# - ``window-c-columns``: stoker's own layout and dtypes (a column-major array per output), every
#   column of a batch in one call (``window-c-memcpy`` makes one call per column);
# - ``window-c-narrow``: each integer column stored in the narrowest integer type holding its
#   values (ids of a 40,000-value vocabulary as uint16, of 4 values as uint8), widened to the
#   output's dtype in the gather: a quarter or an eighth of the bytes read per row;
# - ``window-c-packed``: the narrowed columns packed row by row (one row's columns in one or two
#   cache lines instead of one line per column), transposed into the outputs 64 rows at a time.
# In all three a padded list is gathered from its values + offsets (not from the [N, longest]
# matrix), into [rows, the batch's longest] with the rest zeroed, as stoker's PaddedWriter does;
# a ragged list by the per-row copy loop.
PREPARED_GATHERS = ("window-c-columns", "window-c-narrow", "window-c-packed")
_DSTS = "\0dsts"


def _padded_names(arrays):
    return [n for n, a in arrays.items() if f"{n}_lengths" in arrays and a.ndim == 2]


def _narrowest(a: np.ndarray) -> np.ndarray:
    """A 1-D integer `a` in the narrowest integer dtype (1, 2 or 4 bytes) that holds its values,
    which the gather widens back exactly; other arrays as they are."""
    if a.dtype.kind not in "iu" or a.ndim != 1 or a.itemsize not in (4, 8) or not len(a):
        return a
    lo, hi = int(a.min()), int(a.max())
    for t in ((np.uint8, np.uint16, np.uint32) if lo >= 0 else (np.int8, np.int16, np.int32)):
        info = np.iinfo(t)
        if np.dtype(t).itemsize < a.itemsize and info.min <= lo and hi <= info.max:
            return a.astype(t)
    return a


class Prepared:
    """The input of a ``window-c-*`` gather, made before the clock from the same arrays."""

    def __init__(self, kind: str, arrays: Dict[str, np.ndarray]):
        self.kind = kind
        self.padded = {}
        for n in _padded_names(arrays):
            lengths = arrays[f"{n}_lengths"].astype(np.int64)
            mat = arrays[n]
            offsets = np.zeros(len(lengths) + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            values = np.ascontiguousarray(mat[np.arange(mat.shape[1]) < lengths[:, None]])
            self.padded[n] = (values, offsets)
        skip = set(self.padded) | {f"{n}_lengths" for n in self.padded}
        self.dense = [n for n in _dense(arrays) if n not in skip]
        self.ragged = {n: (np.ascontiguousarray(arrays[n]), arrays[f"{n}_offsets"]) for n in _ragged(arrays)}
        self.rows = len(arrays[self.dense[0]]) if self.dense else 0
        out = [arrays[n] for n in self.dense]
        src = [a if kind == "window-c-columns" else _narrowest(a) for a in out]
        self.src = [np.ascontiguousarray(a) for a in src]
        row = lambda a: a.itemsize * int(np.prod(a.shape[1:], dtype=np.int64))  # noqa: E731
        self.sw = np.array([row(a) for a in self.src], np.int64)
        self.dw = np.array([row(a) for a in out], np.int64)
        self.sgn = np.array([a.dtype.kind == "i" for a in self.src], np.int64)
        if kind == "window-c-packed":
            # Widest first (each column aligned to its width), rows padded to 8 bytes.
            order = sorted(range(len(self.src)), key=lambda j: -int(self.sw[j]))
            self.off = np.zeros(len(self.src), np.int64)
            at = 0
            for j in order:
                self.off[j] = at
                at += int(self.sw[j])
            self.row_bytes = max(8, (at + 7) // 8 * 8)
            self.packed = np.zeros((self.rows, self.row_bytes), np.uint8)
            for j, a in enumerate(self.src):
                lo = int(self.off[j])
                self.packed[:, lo:lo + int(self.sw[j])] = a.reshape(self.rows, -1).view(np.uint8)
            self.src = []
        self.addrs = np.array([a.ctypes.data for a in self.src], np.int64)

    def gather(self, idx, buf):
        lib = _c_lib()
        n = len(idx)
        idx = np.ascontiguousarray(idx, np.int64)
        dsts = buf.get(_DSTS)  # the output addresses, kept with the ring slot's buffers
        if dsts is None:
            dsts = buf[_DSTS] = np.array([buf[name].ctypes.data for name in self.dense], np.int64)
        if self.kind == "window-c-packed":
            lib.gather_packed(self.packed.ctypes.data, self.row_bytes, len(self.dense), self.off.ctypes.data,
                              self.sw.ctypes.data, self.sgn.ctypes.data, self.dw.ctypes.data,
                              idx.ctypes.data, n, dsts.ctypes.data)
        else:
            lib.gather_columns(len(self.dense), self.addrs.ctypes.data, self.sw.ctypes.data,
                               self.sgn.ctypes.data, self.dw.ctypes.data, idx.ctypes.data, n,
                               dsts.ctypes.data)
        out = {name: buf[name][:n] for name in self.dense}
        for name, (values, offsets) in self.padded.items():
            flat = buf[name].reshape(-1)
            lengths = buf[f"{name}_lengths"][:n]
            longest = lib.gather_padded(values.ctypes.data, values.itemsize, offsets.ctypes.data,
                                        idx.ctypes.data, n, flat.ctypes.data, lengths.ctypes.data)
            out[name], out[f"{name}_lengths"] = flat[:n * longest].reshape(n, longest), lengths
        for name, (values, offsets) in self.ragged.items():
            new = np.empty(n + 1, np.int64)
            total = lib.gather_ragged(values.ctypes.data, values.itemsize, offsets.ctypes.data,
                                      idx.ctypes.data, n, buf[name].ctypes.data, new.ctypes.data)
            out[name], out[f"{name}_offsets"] = buf[name][:total], new
        return out


def prepare(kinds: List[str], arrays: Dict[str, np.ndarray], batch_size: int = 0,
            threads: int = 0) -> Dict[str, Prepared]:
    """The prepared inputs of the ``window-c-*`` gathers among `kinds` (before the clock), with
    their ring of output buffers for `batch_size` and `threads` allocated and written once (a
    warm stoker epoch reuses the slabs of the epochs before it: fresh buffers would be pages the
    kernel zeroes inside the clock, ~10 MB of a 25 ms padded epoch)."""
    out = {}
    for k in kinds:
        if k in PREPARED_GATHERS:
            out[k] = Prepared(k, arrays)
            if batch_size and threads:
                out[k].ring = _buffers(arrays, batch_size, threads + 1)
                for buf in out[k].ring:
                    for a in buf.values():
                        a.fill(0)
                out[k].ring_for = (batch_size, threads)
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


def _gather_into(kind, arrays, idx, buf, prepared=None):
    if kind in PREPARED_GATHERS:
        return prepared.gather(idx, buf)
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
           with_index: bool = False, groups: Optional[List[int]] = None,
           prepared: Optional[Dict[str, Prepared]] = None) -> Iterator[Tuple]:
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
    prep = None
    if kind in PREPARED_GATHERS:  # made before the clock by the matrix (`prepare`); here if not
        prep = (prepared or {}).get(kind) or Prepared(kind, arrays)
    sort = kind.endswith("sorted") or kind == "batch-copy-loop"
    ring = threads + 1  # a batch's buffers are reused only after the consumer moved past it
    if prep is not None and getattr(prep, "ring_for", None) == (batch_size, threads):
        bufs = prep.ring
    else:
        bufs = _buffers(arrays, batch_size, ring)

    def task(k):
        idx = order[starts[k]:starts[k] + batch_size]
        if sort:
            idx = np.sort(idx)
        return len(idx), _gather_into(kind, arrays, idx, bufs[k % ring], prep), idx

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
           "window-take", "window-torch", "window-c-memcpy", "window-c-columns", "window-c-narrow",
           "window-c-packed", "batch-copy-loop"]


def gathers_for(arrays: Dict[str, np.ndarray]) -> List[str]:
    rows = len(next(iter(_dense(arrays).values())))
    out = list(GATHERS)
    if rows * len(arrays) > COPY_LOOP_MAX:
        out.remove("batch-copy-loop")
    if _c_lib() is None or not all(a.flags.c_contiguous for a in arrays.values()):
        out.remove("window-c-memcpy")
    if _c_lib() is None:
        out = [k for k in out if k not in PREPARED_GATHERS]
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


def check_shuffled(name, shape, paths, threads, ref, seed: int = 7,
                   window: Optional[int] = None) -> Tuple[bool, str]:
    """A shuffled reader's timed epoch (after its untimed one, as `read` runs it) against the
    reference, row by row as 64-bit hashes (``row_hashes``): every reference row delivered
    exactly once; each window of ``shuffle_windows``'s plan delivered whole at its place in the
    epoch (the rows of its row groups, no other); every batch ``batch_size`` rows but the last;
    neither the row groups' order, nor any window's rows (16 or more), nor the epoch's order the
    files' order; and a batch the consumer still holds unchanged when the next one arrives."""
    window = window or SHUFFLE_WINDOW
    keys = [k for k in ref if not k.endswith("_offsets")]
    hashes, sizes, held = [], [], None
    try:
        for n, out in read(name, shape, paths, threads, {}, seed=seed, window=window):
            if held is not None and not np.array_equal(row_hashes(held, keys), hashes[-1]):
                return False, f"batch {len(sizes) - 1} changed while the consumer held it"
            hashes.append(row_hashes(out, keys))
            sizes.append(n)
            if len(hashes[-1]) != n:
                return False, f"batch {len(sizes) - 1} says {n} rows, holds {len(hashes[-1])}"
            held = out
    except Exception as error:  # noqa: BLE001
        return False, f"{type(error).__name__}: {error}"
    want = row_hashes(ref, keys)
    got = np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)
    if len(got) != len(want):
        return False, f"{len(got)} rows delivered of {len(want)}"
    if not np.array_equal(np.sort(got), np.sort(want)):
        return False, (f"not a permutation of the reference rows: "
                       f"{np.setdiff1d(want, got).size} rows missing")
    batch = shape.batch_size
    if any(n != batch for n in sizes[:-1]) or not 0 < sizes[-1] <= batch:
        return False, f"batch sizes {sorted(set(sizes))} (batch_size {batch})"
    groups = row_groups(paths)
    first = np.concatenate([[0], np.cumsum(groups)[:-1]]).astype(np.int64)
    windows, _ = shuffle_windows(groups, window, seed)
    if len(groups) >= 6 and [g for w in windows for g in w] == list(range(len(groups))):
        return False, "the row groups in the files' order"
    at = 0
    for k, members in enumerate(windows):
        idx = np.concatenate([np.arange(first[g], first[g] + groups[g]) for g in members])
        part = got[at:at + len(idx)]
        if not np.array_equal(np.sort(part), np.sort(want[idx])):
            return False, f"window {k}: rows of other windows at its places (rows {at}-{at + len(idx)})"
        if len(idx) >= 16 and np.array_equal(part, want[idx]):
            return False, f"window {k}: its rows in the files' order (not permuted)"
        at += len(idx)
    if np.array_equal(got, want):
        return False, "the epoch's order is the files' order"
    return True, (f"every row once, {len(windows)} windows each whole at its place and permuted, "
                  f"{len(sizes)} batches of {batch} rows but the last")


def _compare_batch(out, arrays, idx, b) -> Optional[str]:
    """Batch `b` (`out`, as stoker delivers) against rows `idx` of `arrays` (memory_arrays):
    None if equal, else what differs."""
    padded = _padded_names(arrays)
    for key, a in _dense(arrays).items():
        want = a[idx]
        if key in padded and out[key].ndim == 2 and out[key].shape[1] < want.shape[1]:
            # Padded to the batch's longest row (as stoker delivers), not the dataset's:
            # equal up to that width, and nothing but padding cut.
            width = out[key].shape[1]
            if width < int(arrays[f"{key}_lengths"][idx].max(initial=0)) or want[:, width:].any():
                return f"{key} cut to {width} in batch {b}"
            want = np.ascontiguousarray(want[:, :width])
        if not same(out[key], want):
            return f"{key} differs in batch {b}"
    for key in _ragged(arrays):
        off = arrays[f"{key}_offsets"]
        want = np.concatenate([arrays[key][off[i]:off[i + 1]] for i in idx])
        if not same(out[key], want):
            return f"{key} differs in batch {b}"
    return None


# Arrays with more values per row than this are hashed row by row (one digest of each row's
# bytes) instead of value position by value position: a 512x512x3 image has 786,432 positions,
# each a numpy pass over the rows, and the check of the large-images shape took 10+ minutes.
_ROW_DIGEST_ABOVE = 64


def _row_digests(a: np.ndarray) -> np.ndarray:
    """A 64-bit digest of the bytes of each row of the 2-D contiguous `a`."""
    rows = a.view(np.uint8).reshape(len(a), -1)
    return np.frombuffer(b"".join(hashlib.blake2b(r, digest_size=8).digest() for r in rows),
                         np.uint64).copy()


def row_hashes(arrays: Dict[str, np.ndarray], keys: List[str]) -> np.ndarray:
    """One 64-bit hash per row over the bits of the row's values in `keys` (arrays of any rank,
    rows on the first axis): equal multisets of hashes mean the same rows, each row whole."""
    n = len(arrays[keys[0]])
    h = np.full(n, 0x2545F4914F6CDD1D, np.uint64)
    for key in keys:
        a = np.ascontiguousarray(arrays[key]).reshape(n, -1)
        columns = ([_row_digests(a)] if a.shape[1] > _ROW_DIGEST_ABOVE else
                   (np.ascontiguousarray(a[:, j]) for j in range(a.shape[1])))
        for v in columns:
            bits = (v.view(np.uint64) if v.dtype.itemsize == 8 else
                    v.view({4: np.uint32, 2: np.uint16, 1: np.uint8}[v.dtype.itemsize]).astype(np.uint64))
            h ^= bits
            h *= np.uint64(0x9E3779B97F4A7C15)  # wraps modulo 2**64
            h ^= h >> np.uint64(31)
    return h


def check_stoker(shape, path, threads, seed, arrays, cache_dir) -> Tuple[bool, str]:
    """stoker's values, untimed: an unshuffled epoch without a cache batch by batch against the
    rows in file order (every array, lists included); then a shuffled loader with `cache_dir`, its
    filling and its warm epoch, each as a multiset of rows over the dense, non-list arrays."""
    import stoker

    def numpy_batch(batch):
        return {k: (np.asarray(v.values) if hasattr(v, "offsets") else np.asarray(v))
                for k, v in batch.items()}

    try:
        opts = ms.stoker_options(shape, threads, seed)
        at = 0
        for b, batch in enumerate(stoker.Loader(path, **dict(opts, shuffle=False))):
            out = numpy_batch(batch)
            n = len(out[shape.count])
            error = _compare_batch(out, arrays, np.arange(at, at + n), b)
            if error:
                return False, f"unshuffled, no cache: {error}"
            at += n
        if at != len(arrays[shape.count]):
            return False, f"unshuffled, no cache: {at} rows"
        keys = [k for k in _dense(arrays) if k not in _padded_names(arrays)
                and not k.endswith("_lengths")]
        want = np.sort(row_hashes(arrays, keys))
        loader = stoker.Loader(path, **dict(opts, cache_dir=cache_dir))
        for epoch, name in ((0, "filling"), (1, "warm")):
            loader.set_epoch(epoch)
            parts = [row_hashes(numpy_batch(batch), keys) for batch in loader]
            loader.flush_cache()
            got = np.sort(np.concatenate(parts))
            if not np.array_equal(got, want):
                lost = int(np.setdiff1d(want, got).size)
                return False, f"shuffled, {name} epoch: {lost} of {len(want)} rows not delivered"
        loader.close()
    except Exception as error:  # noqa: BLE001
        return False, f"{type(error).__name__}: {error}"
    return True, "values equal to the reference (unshuffled; shuffled filling and warm epochs as rows)"


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
            error = _compare_batch(out, arrays, idx, b)
            if error:
                return False, error
            if b + 1 >= batches:
                break
    except Exception as error:  # noqa: BLE001
        return False, f"{type(error).__name__}: {error}"
    return True, "values equal to the reference"
