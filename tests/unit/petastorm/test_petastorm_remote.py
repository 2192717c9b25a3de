"""A Petastorm store on S3 (moto on loopback): the Loader detects it through storage_options and
decodes it exactly as the local copy; stoker.petastorm reads it too."""

from __future__ import annotations


import numpy as np
import pytest

import stoker

import petastorm_fixtures as pf
from s3_fixtures import moto_available, s3_options, serving_dir

pytestmark = [pytest.mark.skipif(not moto_available(), reason="needs moto[server] and boto3"),
              pytest.mark.skipif(bool(pf.missing()), reason=pf.missing() or "ok"),
              pytest.mark.usefixtures("hermetic_aws_env")]  # conftest.py

BUCKET = "stoker-petastorm"


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    local = str(tmp_path_factory.mktemp("petastorm-remote") / "store")
    pf.write_with_helpers(local, pf.everything_schema(), pf.everything_rows(24), row_group_rows=8)
    with serving_dir(local, BUCKET, "store") as server:
        assert "store/_common_metadata" in server.keys
        yield server


@pytest.mark.timeout(120)
def test_loader_detects_a_petastorm_store_on_s3(moto):
    columns = ["id", "png_rgb", "jpg_gray", "mat", "zmat"]
    kwargs = dict(columns=columns, batch_size=8, seed=4, drop_last=False)
    remote = list(stoker.Loader(f"s3://{BUCKET}/store", storage_options=s3_options(moto),
                                petastorm=True, **kwargs))
    local = list(stoker.Loader(moto.local_dir, **kwargs))
    assert len(remote) == len(local) == 3
    for a, b in zip(remote, local):
        for name in columns:
            assert a[name].shape == b[name].shape and a[name].dtype == b[name].dtype
            np.testing.assert_array_equal(a[name], b[name])
    assert remote[0]["jpg_gray"].shape == (8, 16, 16)
    # Without petastorm=True a remote source is read as stored: no request before the Loader
    # has checked its options.
    raw = stoker.Loader(f"s3://{BUCKET}/store", storage_options=s3_options(moto), **kwargs)
    assert next(iter(raw))["png_rgb"].kind == "binary"


@pytest.mark.timeout(120)
def test_make_reader_reads_s3_with_storage_options(moto):
    from stoker.petastorm import make_reader

    with make_reader(f"s3://{BUCKET}/store", storage_options=s3_options(moto), seed=1) as reader:
        got = sorted(pf.row_key(r) for r in reader)
    with make_reader("file://" + moto.local_dir, seed=1) as reader:
        want = sorted(pf.row_key(r) for r in reader)
    assert len(got) == 24 and got == want
