"""Seeded workload generators: tabular-wide (snappy and zstd) and images (JPEG bytes + label).

Every file is a pure function of (profile sizes, seed). A manifest next to the data records the
parameters; matching data on disk is reused instead of rewritten.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from dataclasses import asdict, dataclass
from typing import Dict, List

import numpy as np

__all__ = ["TabularSpec", "ImageSpec", "SPECS", "tabular_columns", "ensure_tabular", "ensure_images",
           "NUM_FLOAT", "NUM_INT", "EMB_DIMS"]

NUM_FLOAT = 200
NUM_INT = 20
EMB_DIMS = (16, 64)
MANIFEST = "manifest.json"
GENERATOR_VERSION = 2


@dataclass(frozen=True)
class TabularSpec:
    rows: int
    row_group_rows: int  # ~64 MiB of uncompressed data at full size, scaled down for smaller runs
    files: int
    seed: int = 1234


@dataclass(frozen=True)
class ImageSpec:
    images: int
    row_group_rows: int
    files: int
    width: int = 500
    height: int = 375
    quality: int = 90
    seed: int = 4321


# About 1.35 kB of uncompressed data per tabular row: 48k rows is ~64 MiB.
SPECS: Dict[str, Dict[str, object]] = {
    "smoke": {"tabular": TabularSpec(rows=6_000, row_group_rows=1_500, files=2),
              "images": ImageSpec(images=48, row_group_rows=16, files=1)},
    "quick": {"tabular": TabularSpec(rows=240_000, row_group_rows=12_000, files=4),
              "images": ImageSpec(images=1_536, row_group_rows=256, files=2)},
    "full": {"tabular": TabularSpec(rows=2_400_000, row_group_rows=48_000, files=16),
             "images": ImageSpec(images=20_000, row_group_rows=1_000, files=8)},
}


def tabular_columns() -> Dict[str, List[str]]:
    """Column roles of tabular-wide, as every runner reads them."""
    return {
        "float_features": [f"f{i:03d}" for i in range(NUM_FLOAT)],
        "int_features": [f"i{i:02d}" for i in range(NUM_INT)],
        "label": ["label"],
        "embeddings": [f"emb{d}" for d in EMB_DIMS],
        "varlen": ["tags"],
    }


def _manifest_path(path: str) -> str:
    # Beside the dataset folder, not in it: readers treat every file in the folder as Parquet.
    return path.rstrip("/") + "." + MANIFEST


def _read_manifest(path: str) -> dict:
    if not os.path.isdir(path):
        return {}
    try:
        with open(_manifest_path(path)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _write_manifest(path: str, manifest: dict) -> None:
    tmp = _manifest_path(path) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    os.replace(tmp, _manifest_path(path))


def _tabular_table(rng: np.random.Generator, rows: int):
    import pyarrow as pa

    cols = tabular_columns()
    arrays = {}
    for j, name in enumerate(cols["float_features"]):
        # A realistic mix: dense normals, quantised values (compress well), and sparse columns.
        kind = j % 4
        if kind == 0:
            values = rng.standard_normal(rows, dtype=np.float32)
        elif kind == 1:
            values = np.round(rng.standard_normal(rows, dtype=np.float32) * 8) / 8
        elif kind == 2:
            values = rng.exponential(1.0, rows).astype(np.float32)
            values[rng.random(rows) < 0.7] = 0.0
        else:
            values = rng.uniform(0, 1, rows).astype(np.float32)
        arrays[name] = pa.array(values.astype(np.float32, copy=False))
    for j, name in enumerate(cols["int_features"]):
        high = [2, 10, 1000, 1 << 20][j % 4]
        arrays[name] = pa.array(rng.integers(0, high, rows, dtype=np.int64))
    arrays["label"] = pa.array(rng.integers(0, 10, rows, dtype=np.int64))
    for dim, name in zip(EMB_DIMS, cols["embeddings"]):
        flat = rng.standard_normal(rows * dim, dtype=np.float32)
        arrays[name] = pa.FixedSizeListArray.from_arrays(pa.array(flat), dim)
    lengths = rng.integers(0, 17, rows)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = rng.integers(0, 100_000, int(offsets[-1]), dtype=np.int64)
    arrays["tags"] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
    return pa.table(arrays)


def ensure_tabular(root: str, spec: TabularSpec, compression: str, log=print) -> str:
    """Writes (or reuses) tabular-wide with `compression`; returns the dataset folder."""
    import pyarrow.parquet as pq

    path = os.path.join(root, f"tabular-{compression}")
    wanted = {"version": GENERATOR_VERSION, "kind": "tabular", "compression": compression,
              **asdict(spec)}
    if _read_manifest(path) == wanted:
        return path
    log(f"generating tabular-wide ({compression}, {spec.rows:,} rows) in {path}")
    shutil.rmtree(path, ignore_errors=True)
    if os.path.exists(_manifest_path(path)):
        os.remove(_manifest_path(path))
    os.makedirs(path)
    rng = np.random.default_rng([spec.seed, 0 if compression == "snappy" else 1])
    per_file = spec.rows // spec.files
    for f in range(spec.files):
        rows = per_file if f < spec.files - 1 else spec.rows - per_file * (spec.files - 1)
        writer = None
        written = 0
        # Write a row group at a time so memory stays bounded at full size.
        while written < rows:
            n = min(spec.row_group_rows, rows - written)
            table = _tabular_table(rng, n)
            if writer is None:
                writer = pq.ParquetWriter(os.path.join(path, f"part-{f:03d}.parquet"), table.schema,
                                          compression=compression)
            writer.write_table(table, row_group_size=spec.row_group_rows)
            written += n
        writer.close()
    _write_manifest(path, wanted)
    return path


# ------------------------------------------------------------------------------------ images

def _fractal_noise(rng: np.random.Generator, h: int, w: int, octaves: int = 6,
                  persistence: float = 0.55) -> np.ndarray:
    """Multi-octave value noise in [0, 1]: smooth large shapes plus fine texture (1/f-like)."""
    from PIL import Image

    out = np.zeros((h, w), dtype=np.float32)
    amplitude, total = 1.0, 0.0
    for octave in range(octaves):
        cells = 2 ** (octave + 1)
        grid = rng.random((cells + 1, int(cells * w / h) + 1)).astype(np.float32)
        layer = np.asarray(Image.fromarray(grid, mode="F").resize((w, h), Image.BICUBIC))
        out += amplitude * layer
        total += amplitude
        amplitude *= persistence
    out /= total
    out -= out.min()
    out /= max(float(out.max()), 1e-6)
    return out


def _natural_image(rng: np.random.Generator, w: int, h: int) -> "object":
    """A landscape-like picture: sky gradient, noisy terrain bands, textured blobs, sensor grain."""
    from PIL import Image, ImageDraw, ImageFilter

    yy = np.linspace(0, 1, h, dtype=np.float32)[:, None]
    sky_top = rng.uniform(0.3, 0.9, 3).astype(np.float32)
    sky_bottom = rng.uniform(0.5, 1.0, 3).astype(np.float32)
    img = (sky_top * (1 - yy[..., None]) + sky_bottom * yy[..., None]) * np.ones((h, w, 1), np.float32)
    horizon = rng.uniform(0.3, 0.6)
    terrain = _fractal_noise(rng, h, w)
    ridge = horizon + 0.25 * (_fractal_noise(rng, 8, w, 4)[0] - 0.5)
    ground = yy > ridge[None, :]
    base = rng.uniform(0.1, 0.6, 3).astype(np.float32)
    tint = rng.uniform(0.2, 0.8, 3).astype(np.float32)
    ground_rgb = base * (1 - terrain[..., None]) + tint * terrain[..., None]
    img = np.where(ground[..., None], ground_rgb, img)
    clouds = _fractal_noise(rng, h, w, 5)
    img = np.where(ground[..., None], img, img * (1 - 0.5 * clouds[..., None]) + 0.5 * clouds[..., None])
    pil = Image.fromarray(np.clip(img * 255, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(pil)
    for _ in range(int(rng.integers(3, 9))):
        cx, cy = rng.uniform(0, w), rng.uniform(h * 0.3, h)
        rx, ry = rng.uniform(10, w / 5), rng.uniform(10, h / 5)
        colour = tuple(int(c) for c in rng.integers(20, 235, 3))
        draw.ellipse([cx - rx, cy - ry, cx + rx, cy + ry], fill=colour)
    pil = pil.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.6, 1.6))))
    arr = np.asarray(pil).astype(np.float32)
    # Fine texture (foliage, fabric) and sensor grain: what makes real photos cost to decode.
    texture = _fractal_noise(rng, h, w, 8, persistence=0.8)[..., None] - 0.5
    arr += 70 * texture + rng.normal(0, 6, arr.shape).astype(np.float32)
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")


def ensure_images(root: str, spec: ImageSpec, log=print) -> str:
    """Writes (or reuses) the images workload: `image` (JPEG bytes) and `label` (int64)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = os.path.join(root, "images")
    wanted = {"version": GENERATOR_VERSION, "kind": "images", **asdict(spec)}
    if _read_manifest(path) == wanted:
        return path
    log(f"generating images ({spec.images:,} JPEGs {spec.width}x{spec.height} q{spec.quality}) in {path}")
    shutil.rmtree(path, ignore_errors=True)
    if os.path.exists(_manifest_path(path)):
        os.remove(_manifest_path(path))
    os.makedirs(path)
    rng = np.random.default_rng(spec.seed)
    per_file = spec.images // spec.files
    for f in range(spec.files):
        n = per_file if f < spec.files - 1 else spec.images - per_file * (spec.files - 1)
        blobs, labels = [], []
        for _ in range(n):
            img = _natural_image(rng, spec.width, spec.height)
            buf = io.BytesIO()
            img.save(buf, format="JPEG", quality=spec.quality)
            blobs.append(buf.getvalue())
            labels.append(int(rng.integers(0, 1000)))
        table = pa.table({"image": pa.array(blobs, pa.binary()), "label": pa.array(labels, pa.int64())})
        pq.write_table(table, os.path.join(path, f"part-{f:03d}.parquet"),
                       row_group_size=spec.row_group_rows, compression="none")
    _write_manifest(path, wanted)
    return path


def dataset_facts(path: str, columns: List[str]) -> dict:
    """Files, rows, row groups, compressed and uncompressed bytes of `columns` (from footers)."""
    import pyarrow.parquet as pq

    files = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".parquet"))
    rows = row_groups = compressed = uncompressed = 0
    wanted = set(columns)
    for file in files:
        meta = pq.ParquetFile(file).metadata
        rows += meta.num_rows
        row_groups += meta.num_row_groups
        for g in range(meta.num_row_groups):
            rg = meta.row_group(g)
            for c in range(rg.num_columns):
                col = rg.column(c)
                if col.path_in_schema.split(".")[0] in wanted:
                    compressed += col.total_compressed_size
                    uncompressed += col.total_uncompressed_size
    return {"path": path, "files": files, "num_files": len(files), "rows": rows,
            "row_groups": row_groups, "compressed_bytes": compressed,
            "uncompressed_bytes": uncompressed}
