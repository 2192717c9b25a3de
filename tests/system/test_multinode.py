"""Two torchrun "nodes" on loopback (--nnodes=2, 2 processes each) read one dataset from the S3
test server, each node with its own cache folder: every row once per epoch across the 4 ranks,
each block downloaded once per node."""

from __future__ import annotations

import collections
import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from s3_fixtures import ACCESS_KEY, REGION, SECRET_KEY, FaultProxy, MotoServer, moto_available
from stoker_testdata import write_uneven_dataset

pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not moto_available(), reason="moto[server] is not installed")

BUCKET, PREFIX = "multinode", "uneven"
SCRIPT = textwrap.dedent("""
    import json, sys
    import torch.distributed as dist
    import stoker
    endpoint, cache_dir, out = sys.argv[1:4]
    dist.init_process_group("gloo")
    loader = stoker.Loader(
        "s3://{bucket}/{prefix}", columns=["id"], batch_size=100, drop_last=False,
        padding_mask=True, cache_dir=cache_dir, num_threads=1,
        storage_options=dict(endpoint_override=endpoint, scheme="http", region="{region}",
                             access_key="{key}", secret_key="{secret}"))
    seen = {{}}
    for epoch in range(2):
        for batch in loader:  # a finished epoch advances by itself
            ids = batch["id"][~batch["__padding__"]]
            seen.setdefault(epoch, []).extend(ids.tolist())
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, {{"rank": dist.get_rank(), "steps": len(loader),
                                       "seen": seen}})
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(gathered, f)
    loader.close()
    dist.destroy_process_group()
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.timeout(280)
def test_two_nodes_read_s3_with_a_cache_per_node(tmp_path):
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    server = MotoServer()
    proxies = []
    try:
        local = str(tmp_path / PREFIX)
        rows = write_uneven_dataset(local)
        server.create_bucket(BUCKET)
        server.upload_dir(local, BUCKET, PREFIX)
        script = tmp_path / "read.py"
        script.write_text(SCRIPT.format(bucket=BUCKET, prefix=PREFIX, region=REGION,
                                        key=ACCESS_KEY, secret=SECRET_KEY))
        port = _free_port()
        env = dict(os.environ, AWS_EC2_METADATA_DISABLED="true")
        for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            env.pop(key, None)
        nodes = []
        for node in range(2):
            proxy = FaultProxy(server.host, server.port)  # one per node: counts its downloads
            proxies.append(proxy)
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
                   "--nproc_per_node=2", f"--node_rank={node}", "--master_addr=127.0.0.1",
                   f"--master_port={port}", str(script), proxy.endpoint,
                   str(tmp_path / f"cache-node{node}"), str(tmp_path / "out.json")]
            nodes.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, env=env))
        for proc in nodes:
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, out[-1500:] + err[-3000:]
        gathered = json.load(open(tmp_path / "out.json"))
        assert sorted(g["rank"] for g in gathered) == [0, 1, 2, 3]
        assert len({g["steps"] for g in gathered}) == 1, "equal steps on every rank"
        for epoch in ("0", "1"):
            ids = [i for g in gathered for i in g["seen"][epoch]]
            assert sorted(ids) == list(range(rows)), f"epoch {epoch}: every row exactly once"
        for node, proxy in enumerate(proxies):
            gets = [r for r in proxy.log() if r.method == "GET" and r.path.endswith(".parquet")]
            assert gets, f"node {node} read nothing from the store"
            repeated = {k: n for k, n in collections.Counter((r.path, r.range) for r in gets).items()
                        if n > 1}
            assert not repeated, f"node {node} downloaded blocks twice: {repeated}"
    finally:
        for proxy in proxies:
            proxy.close()
        server.stop()
