"""Dataset writers shared by the contract tests (real pyarrow files, written at test time), and
the readers they check them with."""

from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, Iterable, List, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def write_uneven_dataset(root: str, file_rows: Sequence[int] = (1000, 2500, 700, 1800),
                         row_group_size: int = 300, seed: int = 0) -> int:
    """Several files with uneven row groups. Column `id` is the row's global index."""
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(seed)
    start = 0
    for f, rows in enumerate(file_rows):
        ids = np.arange(start, start + rows, dtype=np.int64)
        table = pa.table({
            "id": ids,
            "x": rng.standard_normal(rows).astype(np.float32),
            "emb": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.standard_normal(rows * 4).astype(np.float32)), 4),
            "flag": ids % 3 == 0,
        })
        # Uneven row groups: the last file uses another row-group size.
        size = row_group_size if f % 2 == 0 else row_group_size * 2 + 17
        pq.write_table(table, os.path.join(root, f"part-{f}.parquet"), row_group_size=size)
        start += rows
    return start


def write_wide_dataset(root: str, files: int, rows_per_file: int, columns: int,
                       row_group_size: int, seed: int = 0) -> int:
    """Random float32 columns (incompressible) plus an int64 id."""
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(seed)
    for f in range(files):
        data: Dict[str, np.ndarray] = {
            "id": np.arange(f * rows_per_file, (f + 1) * rows_per_file, dtype=np.int64)}
        for c in range(columns):
            data[f"c{c}"] = rng.standard_normal(rows_per_file).astype(np.float32)
        pq.write_table(pa.table(data), os.path.join(root, f"part-{f}.parquet"),
                       row_group_size=row_group_size, compression="none")
    return files * rows_per_file


def write_labelled_features(root: str, rows: int, features: Sequence[str], files: int = 3,
                            seed: int = 0) -> str:
    """`files` files: an int64 `label` equal to the row's global index and random float32
    `features`, row groups of 1000 rows (the misuse suites' dataset)."""
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(seed)
    per_file = rows // files
    for f in range(files):
        data = {"label": np.arange(f * per_file, (f + 1) * per_file, dtype=np.int64)}
        for name in features:
            data[name] = rng.standard_normal(per_file).astype(np.float32)
        pq.write_table(pa.table(data), os.path.join(root, f"part-{f}.parquet"),
                       row_group_size=1000)
    return root


def write_training_dataset(root: str, rows: int, features: int = 8, seed: int = 0) -> str:
    """One file: int64 `id`, float32 `label` and `f0..f{features-1}` (the training examples'
    schema), row groups of 200 rows."""
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(seed)
    columns = {"id": np.arange(rows, dtype=np.int64),
               "label": rng.standard_normal(rows).astype(np.float32)}
    for i in range(features):
        columns[f"f{i}"] = rng.standard_normal(rows).astype(np.float32)
    pq.write_table(pa.table(columns), os.path.join(root, "part-0.parquet"), row_group_size=200)
    return root


def digest(batches: Iterable[Dict[str, object]]) -> List[str]:
    """One sha256 per batch over every key's name, dtype, shape and bytes."""
    out = []
    for batch in batches:
        h = hashlib.sha256()
        for name in sorted(batch):
            value = batch[name]
            arrays = [value.values, value.offsets] if hasattr(value, "offsets") else [value]
            for array in arrays:
                array = np.asarray(array)
                h.update(name.encode())
                h.update(str(array.dtype).encode())
                h.update(str(array.shape).encode())
                h.update(np.ascontiguousarray(array).tobytes())
        out.append(h.hexdigest())
    # A Loader with cache_dir writes its entries behind the epoch: have them on disk before the
    # test reads the cache's files or opens another loader on it.
    flush = getattr(batches, "flush_cache", None)
    if flush is not None:
        flush()
    return out


# The tests folder: child processes put it on sys.path to import these helpers.
TESTS = os.path.dirname(os.path.abspath(__file__))

# Files from Apache parquet-testing (tests/data/parquet-testing/README.md).
PARQUET_TESTING = os.path.join(TESTS, "data", "parquet-testing")


def fill_cache(source: Any, cache_dir: str, **options: Any) -> None:
    """Fills cache_dir with every entry of a shuffled loader: a loaded machine may skip
    write-behind writes (a later epoch stores them) and close() drops what is still queued, so
    epochs run until one skips nothing, and each ends with a flush."""
    import stoker

    loader = stoker.Loader(source, cache_dir=cache_dir, **options)
    for epoch in range(5):
        loader.set_epoch(epoch)
        skipped = loader.stats()["cache"]["write_skipped"]
        digest(loader)
        loader.flush_cache()
        if loader.stats()["cache"]["write_skipped"] == skipped:
            break
    loader.close()


def load_in_order(source: Any, batch_size: int = 3, **kwargs: Any) -> List[Dict[str, Any]]:
    """Every batch of one epoch in file order (shuffle=False, drop_last=False unless given);
    the loader is closed after."""
    import stoker

    kwargs.setdefault("shuffle", False)
    kwargs.setdefault("drop_last", False)
    with stoker.Loader(source, batch_size=batch_size, **kwargs) as loader:
        return list(loader)


def batch_bytes(batches: Iterable[Dict[str, Any]], keys: bool = True) -> bytes:
    """Every batch's values as bytes, keys in sorted order (with `keys`, each key's name before
    its value); a Ragged column as its flat values, then each level's offsets. For comparing
    epochs byte for byte."""
    from stoker import Ragged

    out = b""
    for batch in batches:
        for key in sorted(batch):
            value = batch[key]
            if keys:
                out += key.encode()
            if isinstance(value, Ragged):
                out += np.asarray(value.flat_values).tobytes()
                for offsets in value.nested_offsets:
                    out += np.asarray(offsets).tobytes()
            else:
                out += np.asarray(value).tobytes()
    return out


def collect_ids(loader) -> List[np.ndarray]:
    return [np.array(batch["id"], copy=True) for batch in loader]


def jpeg_bytes(rng: np.random.Generator, w: int, h: int) -> bytes:
    """A w x h RGB JPEG (quality 90) of smooth random colours, made with Pillow."""
    import io

    from PIL import Image

    base = rng.integers(0, 255, (h // 4 + 1, w // 4 + 1, 3), dtype=np.uint8)
    image = Image.fromarray(base).resize((w, h), Image.BILINEAR)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=90)
    return out.getvalue()
