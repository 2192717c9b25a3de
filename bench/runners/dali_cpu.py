"""NVIDIA DALI's CPU pipeline (PyPI ``nvidia-dali-cuda120``, ``device_id=None``: no GPU).

DALI's recommended image-training pipeline on the CPU backend: ``fn.external_source`` feeds each
batch's JPEG bytes (read with ``ParquetFile.iter_batches``, row groups in order),
``fn.decoders.image_random_crop`` decodes only a random-resized-crop window (DALI's fused
ROI decode, torchvision's sampling rule: area [0.08, 1], ratio [3/4, 4/3], 10 attempts),
``fn.resize`` to 224x224 (antialiased, bilinear), ``fn.crop_mirror_normalize`` flips with a coin
flip and writes CHW uint8. ``num_threads`` = cores, prefetch queue 2; batches go to torch with
``torch.from_numpy(TensorListCPU.as_array())``.
"""

from __future__ import annotations

import numpy as np

from .common import IMAGE_SIZE

NAME = "dali_cpu"
WORKLOADS = ("images",)


def available():
    try:
        from nvidia.dali import fn, pipeline_def, types  # noqa: F401
    except Exception as error:  # noqa: BLE001
        return f"import nvidia.dali failed: {type(error).__name__}: {error} (`make bench-peers` installs it)"
    return None


def config(job):
    try:
        import nvidia.dali

        version = nvidia.dali.__version__
    except Exception:  # noqa: BLE001
        version = "not installed"
    return {"api": "nvidia.dali pipeline_def(device_id=None) (CPU only)", "num_threads": job["threads"],
            "batch_size": job["batch_size"], "prefetch_queue_depth": 2,
            "reader": "fn.external_source <- pyarrow.parquet.ParquetFile.iter_batches per row group",
            "per_batch": "fn.decoders.image_random_crop (ROI decode) + fn.resize(224, 224) + "
                         "fn.crop_mirror_normalize(mirror=coin_flip, CHW uint8)",
            "dali": version}


def _source(files, batch_size):
    import pyarrow.parquet as pq

    for path in files:
        pf = pq.ParquetFile(path)
        for rb in pf.iter_batches(batch_size=batch_size, columns=["image", "label"], use_threads=False):
            blobs = rb.column(0).to_pylist()
            labels = rb.column(1).to_numpy()
            yield ([np.frombuffer(b, np.uint8) for b in blobs],
                   [np.array(v, dtype=np.int64) for v in labels])


def batches(job):
    import torch
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=job["batch_size"], num_threads=job["threads"], device_id=None,
                  seed=job["seed"], prefetch_queue_depth=2)
    def pipeline():
        jpegs, labels = fn.external_source(source=_source(job["files"], job["batch_size"]),
                                           num_outputs=2, batch=True,
                                           dtype=[types.UINT8, types.INT64])
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                               random_area=[0.08, 1.0],
                                               random_aspect_ratio=[3 / 4, 4 / 3],
                                               num_attempts=10)
        images = fn.resize(images, resize_x=IMAGE_SIZE, resize_y=IMAGE_SIZE, antialias=True)
        images = fn.crop_mirror_normalize(images, dtype=types.UINT8, output_layout="CHW",
                                          mirror=fn.random.coin_flip(probability=0.5))
        return images, labels

    from . import Unavailable

    pipe = pipeline()
    try:
        pipe.build()
    except Exception as error:  # noqa: BLE001 (e.g. its image codec library missing here)
        raise Unavailable(f"DALI pipeline build failed: {type(error).__name__}: {error}") from error
    while True:
        try:
            images, labels = pipe.run()
        except StopIteration:
            break
        image = torch.from_numpy(images.as_array())
        label = torch.from_numpy(labels.as_array())
        yield len(label), {"image": image, "label": label}
