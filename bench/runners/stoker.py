"""stoker: the C++ engine. Tabular: features stacked to [B, F] float32, the rest as columns.
Images: decode + random-resized-crop 224 + flip + CHW uint8 as push-down transforms."""

from __future__ import annotations

import shutil
import tempfile

from .common import feature_names, other_columns

NAME = "stoker"
WORKLOADS = ("tabular-snappy", "tabular-zstd", "images")


def available():
    try:
        import stoker  # noqa: F401
    except Exception as error:  # noqa: BLE001
        return f"import stoker failed: {error}"
    return None


def _image_options(job, shuffle=True):
    from stoker import ops

    from .common import IMAGE_SIZE

    return dict(columns=["image", "label"], batch_size=job["batch_size"], shuffle=shuffle,
                seed=job["seed"], drop_last=False, num_threads=job["threads"], output="torch",
                rank=0, world_size=1,
                transforms={"image": [ops.decode_image(), ops.random_resized_crop(IMAGE_SIZE),
                                      ops.horizontal_flip(), ops.to_chw()]})


def _options(job, shuffle=True):
    if job.get("workload") == "images":
        return _image_options(job, shuffle)
    return dict(columns=other_columns(), features=feature_names(), batch_size=job["batch_size"],
                shuffle=shuffle, seed=job["seed"], allow_lossy_cast=True, lists="padded", drop_last=False,
                num_threads=job["threads"], prefetch_bytes="256MiB", output="torch",
                # The job names the data this process reads (the training bench gives each rank
                # its own files), so no sharding from torchrun's environment.
                rank=0, world_size=1)


def config(job):
    opts = _options(job, job.get("shuffle", True))
    if job.get("workload") == "images":
        return {"api": "stoker.Loader(transforms=...)", "image": "decode_image, "
                "random_resized_crop(224), horizontal_flip, to_chw (C++, on the workers)",
                **{k: v for k, v in opts.items() if k not in ("columns", "transforms")}}
    return {"api": "stoker.Loader", "columns": "label, emb16, emb64, tags",
            "features": f"{len(opts['features'])} columns (200 float32 + 20 int64) -> [B, 220] float32",
            **{k: v for k, v in opts.items() if k not in ("columns", "features")},
            "shuffle_window": "65536 rows (default): rows are shuffled, unlike every peer"}


def batches(job, shuffle=True):
    import stoker

    loader = stoker.Loader(job["path"], **_options(job, shuffle))
    job["_stoker_loader"] = loader  # lets the worker read loader.stats() afterwards
    for batch in loader:
        yield len(batch["label"]), batch


def stats(job):
    loader = job.get("_stoker_loader")
    return loader.stats() if loader is not None else None


# ------------------------------------------------- the cache_dir runners (stoker_fill, stoker_warm)

def _cache_loader(job, prefix):
    """A Loader as above over a fresh temporary ``cache_dir`` (named by `prefix`), kept in the
    job for stats() and close_cache_loader()."""
    import stoker

    job["_cache_dir"] = tempfile.mkdtemp(prefix=prefix)
    loader = stoker.Loader(job["path"], **_options(job), cache_dir=job["_cache_dir"])
    job["_stoker_loader"] = loader
    return loader


def close_cache_loader(job):
    """The cache_dir runners' shutdown: closes the loader and removes its cache_dir."""
    loader = job.get("_stoker_loader")
    if loader is not None:
        loader.close()
    shutil.rmtree(job.get("_cache_dir", ""), ignore_errors=True)
