"""The shape matrix's datasets (issue 26): each shape a seeded Parquet dataset, the stoker options
that read it, and the arrays stoker delivers for it as a NumPy reference.

Every dataset is a pure function of (shape, size, seed); a manifest beside it lets a matching
dataset on disk be reused. The reference is built from the generator's own NumPy arrays (not by
reading the Parquet back), so a limit checked against it is checked against the data written.

Canonical form of the delivered arrays (what every decode limit yields and the reference holds):
a dense output is one array ``[N, ...]``; a list output ``name`` is ``name`` (the values of all
rows, concatenated) plus ``name_offsets`` (``[N + 1]`` int64, from 0).
"""

from __future__ import annotations

import io
import json
import os
import shutil
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import numpy as np

GENERATOR_VERSION = 1


@dataclass(frozen=True)
class Shape:
    name: str
    title: str
    rows: int            # default (small) size
    rows_full: int       # --full
    row_group_rows: int
    files: int
    batch_size: int
    count: str           # a dense output whose length is the batch's rows
    dataset: str = ""    # the dataset folder's name when shared with another shape
    lists: Optional[str] = None  # "padded" / "ragged" for the list shapes
    not_run: str = ""    # why the shape is not measured here
    extra: Dict[str, object] = field(default_factory=dict)

    @property
    def data_name(self) -> str:
        return self.dataset or self.name


# --------------------------------------------------------------------------- raw columns

NARROW = {"a": np.int64, "b": np.int64, "c": np.float32, "d": np.float64}
WIDE_F = 300
MANY_INT, MANY_FLOAT = 24, 24
STRINGS = 30
CARDINALITIES = (4, 40, 400, 4000, 40000)
MAX_TOKENS = 200


def _narrow(rng, n, shape):
    return {"a": rng.integers(0, 1 << 40, n, dtype=np.int64), "b": rng.integers(0, 1000, n, dtype=np.int64),
            "c": rng.standard_normal(n, dtype=np.float32), "d": rng.standard_normal(n)}


def _wide(rng, n, shape):
    out = {}
    for j in range(WIDE_F):
        v = rng.standard_normal(n, dtype=np.float32)
        if j % 3 == 1:
            v = np.round(v * 8) / 8
        out[f"f{j:03d}"] = v.astype(np.float32, copy=False)
    out["label"] = rng.integers(0, 10, n, dtype=np.int64)
    return out


def _many(rng, n, shape):
    out = {f"i{j:02d}": rng.integers(0, [10, 1000, 1 << 20][j % 3], n, dtype=np.int64)
           for j in range(MANY_INT)}
    out.update({f"x{j:02d}": rng.standard_normal(n, dtype=np.float32) for j in range(MANY_FLOAT)})
    return out


def _strings(rng, n, shape):
    """Codes per column (the string is ``s{j}_{code:06d}``, so sorting codes sorts strings)."""
    out = {}
    for j in range(STRINGS):
        card = CARDINALITIES[j % len(CARDINALITIES)]
        # Skewed, like real categoricals: a few frequent values and a long tail.
        out[f"s{j:02d}"] = np.minimum(rng.zipf(1.3, n) - 1, card - 1).astype(np.int64)
    out["label"] = rng.integers(0, 10, n, dtype=np.int64)
    return out


def _tokens(rng, n, shape):
    lengths = rng.integers(0, MAX_TOKENS + 1, n)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
    return {"tokens": values, "tokens_offsets": offsets,
            "label": rng.integers(0, 10, n, dtype=np.int64)}


def _jpeg(rng, side):
    from PIL import Image

    from .generators import _natural_image

    img = _natural_image(rng, side, side) if side >= 256 else None
    if img is None:  # small pictures: smooth gradients + shapes + grain (the landscape is slow)
        yy, xx = np.mgrid[0:side, 0:side].astype(np.float32) / side
        c = rng.uniform(0, 1, (3, 3)).astype(np.float32)
        arr = 255 * (c[0] * yy[..., None] + c[1] * xx[..., None] + c[2] * (1 - xx[..., None] * yy[..., None]))
        arr = arr / 2 + rng.normal(0, 12, arr.shape).astype(np.float32) + 40
        img = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _images(rng, n, shape):
    side = shape.extra["side"]
    unique = min(n, shape.extra.get("unique", n))  # large pictures are slow to make: repeat them
    blobs = [_jpeg(rng, side) for _ in range(unique)]
    return {"image": [blobs[i % unique] for i in range(n)],
            "label": rng.integers(0, 1000, n, dtype=np.int64)}


GENERATE: Dict[str, Callable] = {"narrow": _narrow, "wide": _wide, "many": _many,
                                 "strings": _strings, "tokens": _tokens, "images-small": _images,
                                 "images-large": _images}

SHAPES: List[Shape] = [
    Shape("narrow", "narrow (4 columns, batch 65,536)", rows=4_194_304, rows_full=33_554_432,
          row_group_rows=262_144, files=2, batch_size=65_536, count="a"),
    Shape("wide", f"wide stacked ({WIDE_F} float32 features -> one [B, {WIDE_F}] tensor)",
          rows=120_000, rows_full=960_000, row_group_rows=15_000, files=2, batch_size=4096,
          count="label"),
    Shape("many", f"many separate outputs ({MANY_INT} int64 + {MANY_FLOAT} float32, each its own)",
          rows=400_000, rows_full=3_200_000, row_group_rows=50_000, files=2, batch_size=4096,
          count="i00"),
    Shape("strings", f"strings to ids ({STRINGS} categorical columns, cardinality 4-40,000)",
          rows=200_000, rows_full=1_600_000, row_group_rows=25_000, files=2, batch_size=4096,
          count="label"),
    Shape("padded", f"padded lists (int32 token ids, 0-{MAX_TOKENS} long)", rows=200_000,
          rows_full=1_600_000, row_group_rows=25_000, files=2, batch_size=4096, count="label",
          dataset="tokens", lists="padded"),
    Shape("ragged", f"ragged lists (int32 token ids, 0-{MAX_TOKENS} long)", rows=200_000,
          rows_full=1_600_000, row_group_rows=25_000, files=2, batch_size=4096, count="label",
          dataset="tokens", lists="ragged"),
    Shape("images-small", "small images (64x64 JPEG q90, decoded)", rows=15_000, rows_full=120_000,
          row_group_rows=2_500, files=2, batch_size=256, count="label", extra={"side": 64}),
    Shape("images-large", "large images (512x512 JPEG q90, decoded)", rows=1_536, rows_full=8_192,
          row_group_rows=32, files=2, batch_size=32, count="label",
          extra={"side": 512, "unique": 384}),
    Shape("remote", "remote (S3 through the emulated link)", rows=0, rows_full=0,
          row_group_rows=0, files=0, batch_size=4096, count="label",
          not_run="not run by the matrix: the remote case needs rclone's S3 server and the emulated "
                  "link per measurement (minutes each on 2 shared cores); it is measured by "
                  "`python -m bench.remote` and `python -m bench.study --remote` "
                  "(results/remote.md, results/study-remote-quick.md)"),
]
BY_NAME = {s.name: s for s in SHAPES}


def shape_rows(shape: Shape, full: bool) -> int:
    return shape.rows_full if full else shape.rows


def _string_values(codes: np.ndarray, j: int) -> np.ndarray:
    return np.char.add(f"s{j:02d}_", np.char.zfill(codes.astype("U6"), 6))


def raw(shape: Shape, full: bool, tiny: Optional[int] = None) -> Dict[str, object]:
    """The generator's NumPy columns of the whole dataset, file by file concatenated."""
    rows = min(tiny, shape.rows) if tiny else shape_rows(shape, full)
    seed = {"narrow": 11, "wide": 12, "many": 13, "strings": 14, "tokens": 15,
            "images-small": 16, "images-large": 17}[shape.data_name]
    rng = np.random.default_rng(seed)
    return GENERATE[shape.data_name](rng, rows, shape)


def _table(shape: Shape, cols: Dict[str, object], lo: int, hi: int):
    import pyarrow as pa

    arrays = {}
    for name, v in cols.items():
        if name.endswith("_offsets"):
            continue
        if shape.data_name == "strings" and name.startswith("s"):
            j = int(name[1:])
            arrays[name] = pa.array(_string_values(v[lo:hi], j), pa.string())
        elif shape.data_name == "tokens" and name == "tokens":
            off = cols["tokens_offsets"][lo:hi + 1]
            arrays[name] = pa.ListArray.from_arrays(pa.array((off - off[0]).astype(np.int32)),
                                                    pa.array(v[off[0]:off[-1]]))
        elif name == "image":
            arrays[name] = pa.array(v[lo:hi], pa.binary())
        else:
            arrays[name] = pa.array(v[lo:hi])
    return pa.table(arrays)


def _manifest(path: str) -> str:
    return path.rstrip("/") + ".manifest.json"


def ensure(shape: Shape, root: str, full: bool = False, tiny: Optional[int] = None, log=print) -> str:
    """Writes (or reuses) the dataset of `shape`; returns its folder."""
    import pyarrow.parquet as pq

    rows = min(tiny, shape.rows) if tiny else shape_rows(shape, full)
    rg = min(shape.row_group_rows, max(rows // (2 * shape.files), 1)) if tiny else shape.row_group_rows
    path = os.path.join(root, f"{shape.data_name}-{rows}")
    wanted = {"version": GENERATOR_VERSION, "shape": shape.data_name, "rows": rows,
              "row_group_rows": rg, "files": shape.files}
    try:
        with open(_manifest(path)) as f:
            if json.load(f) == wanted and os.path.isdir(path):
                return path
    except (OSError, ValueError):
        pass
    log(f"generating {shape.data_name} ({rows:,} rows) in {path}")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    cols = raw(shape, full, tiny)
    per_file = rows // shape.files
    for f in range(shape.files):
        lo = f * per_file
        hi = rows if f == shape.files - 1 else lo + per_file
        table = _table(shape, cols, lo, hi)
        pq.write_table(table, os.path.join(path, f"part-{f:03d}.parquet"), row_group_size=rg,
                       compression="none" if shape.data_name.startswith("images") else "snappy")
    with open(_manifest(path), "w") as f:
        json.dump(wanted, f)
    return path


def files(path: str) -> List[str]:
    return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".parquet"))


# ------------------------------------------------------------------ what stoker delivers

def vocabularies(shape: Shape, cols: Dict[str, object]) -> Dict[str, List[str]]:
    """stoker's "auto" vocabulary per string column: the sorted distinct values."""
    if shape.data_name != "strings":
        return {}
    return {n: list(_string_values(np.unique(v), int(n[1:])))
            for n, v in cols.items() if n.startswith("s")}


def reference(shape: Shape, cols: Dict[str, object]) -> Dict[str, np.ndarray]:
    """The arrays stoker delivers for the whole dataset, in file order, in canonical form."""
    d = shape.data_name
    if d == "narrow":
        return {k: np.asarray(cols[k], NARROW[k]) for k in NARROW}
    if d == "wide":
        return {"features": np.stack([cols[f"f{j:03d}"] for j in range(WIDE_F)], axis=1),
                "label": cols["label"]}
    if d == "many":
        return dict(cols)
    if d == "strings":
        out = {}
        for n, v in cols.items():
            if n.startswith("s"):
                out[n] = (np.searchsorted(np.unique(v), v) + 1).astype(np.int64)
            else:
                out[n] = v
        return out
    if d == "tokens":
        return dict(cols)
    if d.startswith("images"):
        from PIL import Image

        images = np.stack([np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in cols["image"]])
        return {"image": images, "label": cols["label"]}
    raise KeyError(d)


def stoker_options(shape: Shape, threads: int, seed: int = 7) -> dict:
    opts = dict(batch_size=shape.batch_size, shuffle=True, seed=seed, drop_last=False,
                num_threads=threads, output="numpy", rank=0, world_size=1)
    d = shape.data_name
    if d == "narrow":
        opts["columns"] = list(NARROW)
    elif d == "wide":
        opts.update(columns=["label"], features=[f"f{j:03d}" for j in range(WIDE_F)])
    elif d == "many":
        opts["columns"] = [f"i{j:02d}" for j in range(MANY_INT)] + [f"x{j:02d}" for j in range(MANY_FLOAT)]
    elif d == "strings":
        names = [f"s{j:02d}" for j in range(STRINGS)]
        opts.update(columns=names + ["label"], categories={n: "auto" for n in names})
    elif d == "tokens":
        opts.update(columns=["tokens", "label"], lists=shape.lists)
    elif d.startswith("images"):
        from stoker import ops

        side = shape.extra["side"]
        opts.update(columns=["image", "label"],
                    transforms={"image": [ops.decode_image(shape=[side, side])]})
    return opts


def read_columns(shape: Shape) -> List[str]:
    """The Parquet columns every reader reads."""
    d = shape.data_name
    return {"narrow": list(NARROW), "wide": [f"f{j:03d}" for j in range(WIDE_F)] + ["label"],
            "many": [f"i{j:02d}" for j in range(MANY_INT)] + [f"x{j:02d}" for j in range(MANY_FLOAT)],
            "strings": [f"s{j:02d}" for j in range(STRINGS)] + ["label"],
            "tokens": ["tokens", "label"], "images-small": ["image", "label"],
            "images-large": ["image", "label"]}[d]
