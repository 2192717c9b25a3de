"""DataLoader + torchvision: ``torchvision.io.decode_jpeg`` + ``transforms.v2`` in the workers.

The same DataLoader as the PIL runner (each worker takes every k-th row group of a seeded order,
reads it with ``iter_batches``), but each batch's JPEG bytes are decoded by
``torchvision.io.decode_jpeg`` (libjpeg-turbo, a list of tensors in one call) and transformed by
``transforms.v2.Compose([RandomResizedCrop(224, antialias=True), RandomHorizontalFlip()])`` on
CHW uint8 tensors, then stacked: what torchvision's documentation recommends today.
"""

from __future__ import annotations

import random

from .common import IMAGE_SIZE
from .torch_dataloader import _Sharded

NAME = "torchvision_v2"
WORKLOADS = ("images",)


def available():
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
        from torchvision.io import decode_jpeg  # noqa: F401
        from torchvision.transforms import v2  # noqa: F401
    except Exception as error:  # noqa: BLE001
        reason = f"import torchvision failed: {type(error).__name__}: {error}"
        if "torchvision::nms" in str(error):
            reason += _why_no_extension()
        return reason
    return None


def _why_no_extension() -> str:
    """torchvision's C++ extension did not load: say which libraries it misses."""
    import glob
    import os
    import subprocess

    try:
        import importlib.util

        spec = importlib.util.find_spec("torchvision")
        folder = os.path.dirname(spec.origin)
        library = glob.glob(os.path.join(folder, "_C*.so"))[0]
        ldd = subprocess.run(["ldd", library], capture_output=True, text=True, timeout=30).stdout
        missing = [line.split()[0] for line in ldd.splitlines() if "not found" in line]
        cuda = [name for name in missing if "cuda" in name]
        if cuda:
            import torch

            return (f" (its _C extension links {', '.join(cuda)}: the torchvision wheel on PyPI is "
                    f"built against CUDA torch, and this torch is {torch.__version__}, CPU-only)")
    except Exception:  # noqa: BLE001
        pass
    return ""


def config(job):
    try:  # the version without importing it (an import may fail: see available())
        from importlib.metadata import version

        torchvision_version = version("torchvision")
    except Exception:  # noqa: BLE001
        torchvision_version = "not installed"
    return {"api": "torch.utils.data.DataLoader(IterableDataset)", "num_workers": job["threads"],
            "batch_size": "None (dataset yields whole batches)", "prefetch_factor": 2,
            "reader": "pyarrow.parquet.ParquetFile.iter_batches(batch_size, columns) per row group",
            "per_batch": "torchvision.io.decode_jpeg(list of tensors) + transforms.v2.Compose("
                         "[RandomResizedCrop(224, antialias=True), RandomHorizontalFlip()]) per "
                         "image, torch.stack (CHW uint8)",
            "torchvision": torchvision_version}


class _Images(_Sharded):
    def __iter__(self):
        import pyarrow.parquet as pq
        import torch
        from torchvision.io import decode_jpeg, ImageReadMode
        from torchvision.transforms import v2

        wid, mine = self._my_row_groups()
        torch.manual_seed(self.seed * 1000 + wid)
        random.seed(self.seed * 1000 + wid)
        augment = v2.Compose([v2.RandomResizedCrop(IMAGE_SIZE, antialias=True),
                              v2.RandomHorizontalFlip()])
        for path, g in mine:
            pf = pq.ParquetFile(path)
            for rb in pf.iter_batches(batch_size=self.batch_size, row_groups=[g],
                                      columns=["image", "label"], use_threads=False):
                blobs = [torch.frombuffer(b, dtype=torch.uint8) for b in rb.column(0).to_pylist()]
                images = decode_jpeg(blobs, mode=ImageReadMode.RGB)
                batch = torch.stack([augment(img) for img in images])
                yield {"image": batch, "label": torch.from_numpy(rb.column(1).to_numpy())}


def batches(job):
    import warnings

    import torch

    warnings.filterwarnings("ignore", message="The given buffer is not writable")
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    dataset = _Images(job["files"], job["batch_size"], job["seed"])
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=job["threads"],
                                         prefetch_factor=2 if job["threads"] > 0 else None)
    for batch in loader:
        yield len(batch["label"]), batch
