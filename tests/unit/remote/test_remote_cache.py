"""The node-local cache in front of S3: one download per block per node, warm epochs offline."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import textwrap

import pytest

import stoker
from s3_fixtures import dataset_server, moto_available, s3_options
from stoker_testdata import TESTS, digest, write_uneven_dataset

pytestmark = pytest.mark.skipif(not moto_available(), reason="needs moto[server] and boto3")

BUCKET = "stoker-cache"
PREFIX = "uneven"
OPTIONS = dict(batch_size=100, seed=9, shuffle_window=800, drop_last=False)

moto = dataset_server(BUCKET, PREFIX, write_uneven_dataset)


def data_gets(proxy):
    return [r for r in proxy.log() if r.method == "GET" and r.path.endswith(".parquet")]


@pytest.mark.timeout(180)
def test_processes_sharing_a_cache_download_each_block_once(moto, proxy, tmp_path):
    reference = digest(stoker.Loader(moto.local_dir, **OPTIONS))
    cache_dir = str(tmp_path / "cache")
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {TESTS!r})
        import stoker
        from stoker_testdata import digest
        loader = stoker.Loader("s3://{BUCKET}/{PREFIX}", cache_dir={cache_dir!r},
                               storage_options={s3_options(proxy)!r}, num_threads=2, **{OPTIONS!r})
        print(json.dumps(digest(loader)))
    """)
    env = dict(os.environ, AWS_EC2_METADATA_DISABLED="true")
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(3)]
    for proc in procs:
        out, err = proc.communicate(timeout=150)
        assert proc.returncode == 0, err[-2000:]
        assert json.loads(out) == reference
    gets = data_gets(proxy)
    assert gets, "no object reads reached the server"
    per_range = collections.Counter((r.path, r.range) for r in gets)
    repeated = {key: n for key, n in per_range.items() if n > 1}
    assert not repeated, f"blocks downloaded more than once: {repeated}"


@pytest.mark.timeout(120)
def test_warm_epoch_reads_nothing_from_the_store(moto, proxy, tmp_path):
    cache_dir = str(tmp_path / "cache")
    source = f"s3://{BUCKET}/{PREFIX}"
    cold = stoker.Loader(source, cache_dir=cache_dir, storage_options=s3_options(proxy), **OPTIONS)
    cold_digest = digest(cold)
    cold.flush_cache()
    assert data_gets(proxy)
    proxy.clear()
    before = len(proxy.log())
    warm = stoker.Loader(source, cache_dir=cache_dir, storage_options=s3_options(proxy), **OPTIONS)
    warm.set_epoch(1)
    digest(warm)
    warm.set_epoch(0)
    assert digest(warm) == cold_digest
    assert data_gets(proxy)[before:] == []  # footers and row groups all came from the cache
    assert warm.stats()["cache"]["misses"] == 0


@pytest.mark.timeout(60)
def test_stats_count_storage_requests(moto, proxy):
    loader = stoker.Loader(f"s3://{BUCKET}/{PREFIX}", storage_options=s3_options(proxy), **OPTIONS)
    for _ in loader:
        pass
    counters = loader.stats()["storage"]
    assert counters["requests"] >= len(data_gets(proxy)) > 0
    assert counters["failures"] == 0
