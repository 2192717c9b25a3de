"""SPDL (PyPI ``spdl``, Meta's Scalable and Performant Data Loading) on the images workload.

SPDL's own recipe: a ``spdl.pipeline.PipelineBuilder`` whose source yields each batch's JPEG bytes
(``ParquetFile.iter_batches``, row groups in order), a ``pipe`` stage that decodes and transforms
one image per task on a thread pool of ``threads`` workers (``spdl.io.demux_image`` +
``decode_packets`` with an FFmpeg filter graph: crop to a torchvision RandomResizedCrop box drawn
with Python's ``random``, scale to 224x224 bilinear, ``hflip`` with probability 0.5; RGB24),
``aggregate(batch_size)``, and a stage that stacks the frames into a CHW uint8 tensor. SPDL's
native decoders release the GIL. Needs the FFmpeg shared libraries (Debian ``libavcodec59``,
``libavfilter8``, ``libavformat59``, ``libavutil57``, ``libswscale6``, ...).
"""

from __future__ import annotations

import random

import numpy as np

from .common import IMAGE_SIZE, random_crop_box

NAME = "spdl_io"
WORKLOADS = ("images",)


def available():
    try:
        import spdl.io  # noqa: F401
        import spdl.pipeline  # noqa: F401
    except Exception as error:  # noqa: BLE001
        return f"import spdl failed: {type(error).__name__}: {error} (`make bench-peers` installs it)"
    try:  # the native library loads lazily, on first use: FFmpeg must be installed
        import spdl.io

        spdl.io.demux_image(_tiny_jpeg())
    except Exception as error:  # noqa: BLE001
        return f"spdl.io cannot decode: {type(error).__name__}: {str(error)[:400]}"
    return None


def config(job):
    try:
        from importlib.metadata import version

        v = version("spdl")
    except Exception:  # noqa: BLE001
        v = "not installed"
    return {"api": "spdl.pipeline.PipelineBuilder: source -> pipe(decode+transform, "
                   f"concurrency={job['threads']}) -> aggregate({job['batch_size']}) -> pipe(stack)",
            "per_image": "spdl.io.demux_image + decode_packets(filter: crop (RandomResizedCrop box, "
                         "Python random) + scale 224x224 bilinear + hflip p=0.5, rgb24)",
            "spdl": v}


def batches(job):
    import pyarrow.parquet as pq
    import spdl.io
    import torch
    from spdl.pipeline import PipelineBuilder

    rng = random.Random(job["seed"])

    def source():
        for path in job["files"]:
            pf = pq.ParquetFile(path)
            for rb in pf.iter_batches(batch_size=job["batch_size"], columns=["image", "label"],
                                      use_threads=False):
                for blob, label in zip(rb.column(0).to_pylist(), rb.column(1).to_pylist()):
                    yield blob, label

    def decode(item):
        blob, label = item
        packets = spdl.io.demux_image(blob)
        codec = packets.codec
        x, y, w, h = random_crop_box(codec.width, codec.height, rng)
        flip = ",hflip" if rng.random() < 0.5 else ""
        desc = (f"crop={w}:{h}:{x}:{y},scale={IMAGE_SIZE}:{IMAGE_SIZE}:flags=bilinear{flip},"
                "format=pix_fmts=rgb24")
        frames = spdl.io.decode_packets(packets, filter_desc=desc)
        array = spdl.io.to_numpy(spdl.io.convert_frames(frames))
        return array, label

    def stack(items):
        images = np.stack([a.reshape(IMAGE_SIZE, IMAGE_SIZE, 3) for a, _ in items])
        images = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()
        return images, torch.tensor([label for _, label in items], dtype=torch.int64)

    pipeline = (PipelineBuilder()
                .add_source(source())
                .pipe(decode, concurrency=job["threads"])
                .aggregate(job["batch_size"], drop_last=False)
                .pipe(stack)
                .add_sink(3)
                .build(num_threads=job["threads"]))
    with pipeline.auto_stop():
        for images, labels in pipeline:
            yield len(labels), {"image": images, "label": labels}


def _tiny_jpeg():
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (10, 20, 30)).save(buffer, "JPEG")
    return buffer.getvalue()
