"""Device hand-off: the pipelining runs on the CPU here (a copy function standing in for the CUDA
copy); the CUDA path itself runs where a GPU exists."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import stoker
from stoker._device import DeviceFeeder
from stoker.errors import InvalidOptionError
from stoker_testdata import digest, write_uneven_dataset

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("device"))
    write_uneven_dataset(root)
    return root


OPTIONS = dict(columns=["id", "x", "emb"], batch_size=128, seed=3, output="torch")


def _cpu_feeder(log):
    def copy(batch):
        index = int(batch["id"][0])
        log.append(("copy", index))
        moved = {k: v.clone() for k, v in batch.items()}
        return moved, lambda: log.append(("done", index))
    return DeviceFeeder(copy)


def test_feeder_keeps_one_batch_in_flight(dataset):
    log = []
    loader = stoker.Loader(dataset, **OPTIONS)
    reference = [dict(b) for b in stoker.Loader(dataset, **OPTIONS)]
    out = []
    for batch in _cpu_feeder(log)(iter(loader)):
        log.append(("yield", int(batch["id"][0])))
        out.append(batch)
    assert digest(out) == digest(reference)
    firsts = [int(b["id"][0]) for b in reference]
    # copy(i+1) is issued before batch i is handed out, and done(i) right before it.
    for i in range(len(firsts) - 1):
        assert log.index(("copy", firsts[i + 1])) < log.index(("yield", firsts[i]))
        assert log.index(("done", firsts[i])) == log.index(("yield", firsts[i])) - 1


def test_state_dict_counts_what_the_caller_received_with_a_feeder(dataset):
    full = digest(stoker.Loader(dataset, **OPTIONS))
    loader = stoker.Loader(dataset, **OPTIONS)
    loader._feeder = _cpu_feeder([])  # what device='cuda' installs, with CPU copies
    it = iter(loader)
    head = digest(itertools.islice(it, 5))
    state = loader.state_dict()
    assert state["batch"] == 5  # not 6: the batch in flight is not the caller's yet
    it.close()
    resumed = stoker.Loader(dataset, **OPTIONS)
    resumed.load_state_dict(state)
    assert head + digest(resumed) == full
    loader.set_epoch(0)
    assert digest(loader) == full and loader.state_dict()["epoch"] == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_device_without_a_gpu_is_a_clear_error(dataset):
    with pytest.raises(InvalidOptionError, match="device='cuda'.*no CUDA device"):
        stoker.Loader(dataset, device="cuda", **OPTIONS)
    with pytest.raises(InvalidOptionError, match="pin_memory=True.*(libcudart|no GPU)"):
        stoker.Loader(dataset, pin_memory=True, **OPTIONS)
    with pytest.raises(InvalidOptionError, match="only 'cpu' and 'cuda"):
        stoker.Loader(dataset, device="meta", **OPTIONS)
    cpu = stoker.Loader(dataset, device="cpu", **OPTIONS)  # no hand-off: plain CPU tensors
    assert digest(cpu) == digest(stoker.Loader(dataset, **OPTIONS))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_batches_arrive_on_the_gpu(dataset):
    with pytest.raises(InvalidOptionError, match="output='torch'"):
        stoker.Loader(dataset, device="cuda", **dict(OPTIONS, output="numpy"))
    reference = [dict(b) for b in stoker.Loader(dataset, **OPTIONS)]
    loader = stoker.Loader(dataset, device="cuda", **OPTIONS)
    got = []
    for batch in loader:
        assert all(v.device.type == "cuda" for v in batch.values())
        got.append({k: v.cpu() for k, v in batch.items()})
    assert digest(got) == digest(reference)
    assert all(np.array_equal(a["id"], b["id"]) for a, b in zip(got, reference))
