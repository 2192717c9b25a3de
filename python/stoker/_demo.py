"""`stoker demo`: writes a small synthetic dataset locally and streams it with stoker."""

from __future__ import annotations

import os
import time

import numpy as np

__all__ = ["write_demo_dataset", "run_demo"]

NUM_FEATURES = 32


def write_demo_dataset(path: str, rows: int = 400_000, files: int = 4, seed: int = 0) -> None:
    """Writes `files` Parquet files of tabular data (features, a label, an embedding)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(seed)
    per_file = rows // files
    for f in range(files):
        columns = {f"f{i}": rng.standard_normal(per_file, dtype=np.float32)
                   for i in range(NUM_FEATURES)}
        columns["label"] = rng.integers(0, 2, per_file, dtype=np.int64)
        embedding = rng.standard_normal(per_file * 16, dtype=np.float32)
        columns["embedding"] = pa.FixedSizeListArray.from_arrays(pa.array(embedding), 16)
        columns["row_id"] = np.arange(f * per_file, (f + 1) * per_file, dtype=np.int64)
        table = pa.table(columns)
        tmp = os.path.join(path, f".part-{f:03d}.parquet.tmp")
        pq.write_table(table, tmp, row_group_size=25_000, compression="snappy")
        os.replace(tmp, os.path.join(path, f"part-{f:03d}.parquet"))


def run_demo(path: str, batch_size: int = 4096) -> None:
    from .loader import Loader

    if not os.path.isdir(path) or not any(n.endswith(".parquet") for n in os.listdir(path)):
        print(f"writing a synthetic dataset to {path} ...")
        write_demo_dataset(path)
    loader = Loader(path, columns=["label", "embedding", "row_id"],
                    features=[f"f{i}" for i in range(NUM_FEATURES)],
                    batch_size=batch_size, seed=0)
    print(loader)
    first = None
    rows = 0
    for epoch in range(2):
        loader.set_epoch(epoch)
        start = time.perf_counter()
        for batch in loader:
            if first is None:
                first = {k: (tuple(v.shape), str(v.dtype)) for k, v in batch.items()}
            rows += len(batch["label"])
        elapsed = time.perf_counter() - start
        print(f"epoch {epoch}: {loader.num_rows} rows in {elapsed:.3f} s = "
              f"{loader.num_rows / elapsed:,.0f} rows/s")
    print("one batch:")
    for name, (shape, dtype) in first.items():
        print(f"  {name:10s} shape={shape} dtype={dtype}")
    stats = loader.stats()
    decode = next(stage for stage in stats["stages"] if stage["name"] == "decode")
    print(f"decode busy {decode['busy_s']:.3f} s over {decode['items']} tasks; "
          f"consumer waited {stats['consumer_wait_s']:.3f} s")
    loader.close()
