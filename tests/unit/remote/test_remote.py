"""Remote sources (s3://) against a loopback moto server behind a fault-injecting proxy.

Checks: byte-identical batches to the same files read locally; every way of configuring S3
(storage_options, URI query parameters, environment variables, credentials files); retries of
transient errors and fast, clear failures for permanent ones; no hang when the server goes away;
listing and footers fetched once per loader; credentials never shown.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pyarrow.parquet as pq
import pytest

import stoker
from stoker.errors import DatasetNotFoundError, InvalidOptionError, StorageError

from s3_fixtures import ACCESS_KEY, REGION, SECRET_KEY, SESSION_TOKEN
from s3_fixtures import dataset_server, moto_available, s3_options
from stoker_testdata import digest, write_uneven_dataset

# hermetic_aws_env (conftest.py): no credentials, profile or config from the machine running
# the tests.
pytestmark = [pytest.mark.skipif(not moto_available(), reason="needs moto[server] and boto3"),
              pytest.mark.usefixtures("hermetic_aws_env")]

BUCKET = "stoker-remote"
PREFIX = "uneven"
FILE_ROWS = (1000, 2500, 700, 1800)

moto = dataset_server(BUCKET, PREFIX, lambda local: write_uneven_dataset(local, FILE_ROWS))


def source():
    return f"s3://{BUCKET}/{PREFIX}"


def epoch_digest(src, **kwargs):
    with stoker.Loader(src, **kwargs) as loader:
        return digest(loader)


def stats_text(loader):
    try:
        return str(loader.stats())
    except AttributeError:  # the Python front and the extension briefly out of step
        raw = loader._engine.stats()
        return str({name: getattr(raw, name) for name in dir(raw) if not name.startswith("_")})


def gets_of(log, key_suffix):
    return [r for r in log if r.method == "GET" and r.path.endswith(key_suffix)]


# --------------------------------------------------------------------------- same bytes


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shuffle", [True, False])
def test_s3_batches_match_local(moto, proxy, shuffle):
    kwargs = dict(batch_size=256, shuffle=shuffle, seed=7, num_threads=4, drop_last=False)
    local = epoch_digest(moto.local_dir, **kwargs)
    remote = epoch_digest(source(), storage_options=s3_options(proxy), **kwargs)
    assert len(local) == len(remote) > 10
    assert remote == local
    # Signed with the given key, and every request went through the proxy.
    log = proxy.log()
    assert log and {r.access_key for r in log} == {ACCESS_KEY}


@pytest.mark.timeout(120)
def test_s3_second_epoch_and_small_tasks_match_local(moto, proxy):
    kwargs = dict(batch_size=100, seed=3, num_threads=2, task_bytes=4096,
                  columns=["id", "emb"])
    with stoker.Loader(moto.local_dir, **kwargs) as loader:
        loader.set_epoch(1)
        local = digest(loader)
    with stoker.Loader(source(), storage_options=s3_options(proxy), **kwargs) as loader:
        loader.set_epoch(1)
        remote = digest(loader)
    assert remote == local


# ------------------------------------------------------------------------ configuration


@pytest.mark.timeout(60)
def test_uri_query_parameters_and_env_credentials(moto, proxy, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFROMENVIRONMENT1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret-value")
    uri = (f"s3://{BUCKET}/{PREFIX}?endpoint_override={proxy.endpoint}&scheme=http"
           f"&region={REGION}")
    kwargs = dict(batch_size=500, seed=1)
    assert epoch_digest(uri, **kwargs) == epoch_digest(moto.local_dir, **kwargs)
    assert {r.access_key for r in proxy.log()} == {"AKIAFROMENVIRONMENT1"}


@pytest.mark.timeout(60)
def test_everything_from_the_environment(moto, proxy, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://{proxy.endpoint}")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFROMENVIRONMENT2")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret-value")
    kwargs = dict(batch_size=500, seed=11)
    assert epoch_digest(source(), **kwargs) == epoch_digest(moto.local_dir, **kwargs)
    assert {r.access_key for r in proxy.log()} == {"AKIAFROMENVIRONMENT2"}


@pytest.mark.timeout(60)
def test_storage_options_override_uri_parameters(moto, proxy):
    # The URI points at a closed port; storage_options redirect to the proxy and win.
    uri = f"s3://{BUCKET}/{PREFIX}?endpoint_override=127.0.0.1:9&scheme=https&region=eu-west-3"
    kwargs = dict(batch_size=500, seed=2)
    assert (epoch_digest(uri, storage_options=s3_options(proxy), **kwargs)
            == epoch_digest(moto.local_dir, **kwargs))


@pytest.mark.timeout(60)
def test_credentials_file_and_session_token(moto, proxy, monkeypatch, tmp_path):
    credentials = tmp_path / "credentials"
    credentials.write_text("[default]\naws_access_key_id = AKIAFROMCREDFILE0001\n"
                           "aws_secret_access_key = file-secret-value\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    options = dict(endpoint_override=proxy.endpoint, scheme="http", region=REGION)
    with stoker.Loader(source(), storage_options=options, batch_size=1000) as loader:
        assert sum(len(b["id"]) for b in loader) == sum(FILE_ROWS)
    assert {r.access_key for r in proxy.log()} == {"AKIAFROMCREDFILE0001"}
    proxy.clear()

    options = s3_options(proxy, session_token=SESSION_TOKEN)
    with stoker.Loader(source(), storage_options=options, batch_size=1000) as loader:
        assert len(loader) == 6
    assert proxy.log() and all(r.has_token for r in proxy.log())


@pytest.mark.timeout(60)
def test_anonymous_requests_are_unsigned(moto, proxy):
    public = "stoker-public"
    moto.client.create_bucket(Bucket=public, ACL="public-read")
    for key in moto.keys:
        local = os.path.join(moto.local_dir, os.path.basename(key))
        moto.client.upload_file(local, public, key, ExtraArgs={"ACL": "public-read"})
    options = dict(endpoint_override=proxy.endpoint, scheme="http", region=REGION,
                   anonymous=True)
    kwargs = dict(batch_size=1000, seed=8)
    assert (epoch_digest(f"s3://{public}/{PREFIX}", storage_options=options, **kwargs)
            == epoch_digest(moto.local_dir, **kwargs))
    assert proxy.log() and {r.access_key for r in proxy.log()} == {""}


@pytest.mark.timeout(30)
def test_bad_storage_options_name_the_key_not_the_value(proxy):
    with pytest.raises(InvalidOptionError, match="unknown key 'secret'") as info:
        stoker.Loader(source(), storage_options=s3_options(proxy, secret=SECRET_KEY + "x"))
    assert SECRET_KEY not in str(info.value)
    with pytest.raises(InvalidOptionError, match="connect_timeout"):
        stoker.Loader(source(), storage_options=s3_options(proxy, connect_timeout="soon"))
    with pytest.raises(InvalidOptionError, match="both access_key and secret_key"):
        stoker.Loader(source(), storage_options=dict(access_key=ACCESS_KEY))
    with pytest.raises(InvalidOptionError, match="one of"):
        stoker.Loader(source(), storage_options=s3_options(proxy, anonymous=True))
    with pytest.raises(InvalidOptionError, match="Unexpected query parameter"):
        stoker.Loader(source() + "?bogus=1", storage_options=s3_options(proxy))
    with pytest.raises(InvalidOptionError, match="s3:// sources only"):
        stoker.Loader("gs://bucket/data", storage_options={"region": "x"})
    with pytest.raises(InvalidOptionError):
        stoker.Loader("nosuchscheme://bucket/data")
    assert proxy.log() == []  # all refused before any request


@pytest.mark.timeout(60)
def test_request_concurrency_bounds_requests_in_flight(moto, proxy):
    proxy.inject("delay", -1, delay_s=0.02)
    options = s3_options(proxy, request_concurrency=1)
    kwargs = dict(batch_size=300, seed=4, num_threads=4, num_io_threads=4)
    assert (epoch_digest(source(), storage_options=options, **kwargs)
            == epoch_digest(moto.local_dir, **kwargs))
    assert len(proxy.log()) > 10
    assert proxy.max_in_flight == 1


# ------------------------------------------------------------------------------ retries


@pytest.mark.timeout(60)
def test_transient_503_and_resets_are_retried(moto, proxy):
    kwargs = dict(batch_size=256, seed=5, num_threads=2)
    expected = epoch_digest(moto.local_dir, **kwargs)
    proxy.inject("503", 2)  # the listing
    proxy.inject("drop", 1, method="GET", path="part-1")
    proxy.inject("drop_body", 1, method="GET", path="part-2")
    proxy.inject("500", 1, method="GET", path="part-3")
    loader = stoker.Loader(source(), storage_options=s3_options(proxy), retry_base_delay=0.01,
                           **kwargs)
    proxy.inject("503", 3, method="GET")  # column-chunk reads
    with loader:
        assert digest(loader) == expected
    injected = [r.injected for r in proxy.log() if r.injected]
    assert sorted(injected) == sorted(["503"] * 5 + ["drop", "drop_body", "500"])


@pytest.mark.timeout(60)
def test_persistent_503_at_listing_fails_after_max_retries(proxy):
    proxy.inject("503", -1)
    start = time.monotonic()
    with pytest.raises(StorageError) as info:
        stoker.Loader(source(), storage_options=s3_options(proxy), max_retries=3,
                      retry_base_delay=0.05)
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert f"'s3://{BUCKET}/{PREFIX}'" in message
    assert "after 3 retries" in message and "503" in message
    assert len(proxy.log()) == 4  # one try plus three retries
    # Backoff 0.05, 0.1, 0.2 s times jitter in [0.5, 1): between 0.175 and 0.35 s of sleep.
    assert 0.17 <= elapsed < 5.0
    gaps = [b.time - a.time for a, b in zip(proxy.log(), proxy.log()[1:])]
    assert gaps[2] > gaps[0]  # the delay grows (by at least 0.05 s of sleep)


@pytest.mark.timeout(60)
def test_persistent_503_on_reads_names_the_object(moto, proxy):
    loader = stoker.Loader(source(), storage_options=s3_options(proxy), max_retries=2,
                           retry_base_delay=0.01, batch_size=100, num_threads=1, shuffle=False)
    proxy.inject("503", -1, method="GET", path="part-0")
    start = time.monotonic()
    with loader, pytest.raises(OSError) as info:
        for _ in loader:
            pass
    assert time.monotonic() - start < 10
    message = str(info.value)
    assert f"s3://{BUCKET}/{PREFIX}/part-0.parquet" in message, message
    assert "after 2 retries" in message, message
    # The SDK reports SLOW_DOWN from the XML body, or SERVICE_UNAVAILABLE when it has none.
    assert any(word in message for word in ("SLOW_DOWN", "SERVICE_UNAVAILABLE", "503")), message
    assert len([r for r in proxy.log() if r.injected == "503"]) >= 3


@pytest.mark.timeout(60)
@pytest.mark.parametrize("phase", ["footer", "decode"])
def test_read_failures_after_retries_are_storage_errors(proxy, phase):
    options = s3_options(proxy)
    if phase == "footer":
        proxy.inject("503", -1, method="GET", path="part-2")
        with pytest.raises(StorageError):
            stoker.Loader(source(), storage_options=options, max_retries=1,
                          retry_base_delay=0.01)
    else:
        loader = stoker.Loader(source(), storage_options=options, max_retries=1,
                               retry_base_delay=0.01, num_threads=1)
        proxy.inject("503", -1, method="GET")
        with loader, pytest.raises(StorageError):
            for _ in loader:
                pass


@pytest.mark.timeout(60)
def test_slow_response_times_out_and_is_retried(moto, proxy):
    kwargs = dict(batch_size=1000, seed=6, num_threads=1)
    expected = epoch_digest(moto.local_dir, **kwargs)
    options = s3_options(proxy, request_timeout=1, connect_timeout=1)
    loader = stoker.Loader(source(), storage_options=options, retry_base_delay=0.01, **kwargs)
    proxy.inject("delay", 1, method="GET", delay_s=6)
    start = time.monotonic()
    with loader:
        assert digest(loader) == expected
    assert time.monotonic() - start < 6  # the stalled request was abandoned, not waited out
    assert [r.injected for r in proxy.log()].count("delay") == 1


# ----------------------------------------------------------------------- permanent errors


@pytest.mark.timeout(30)
@pytest.mark.parametrize("src", [f"s3://{BUCKET}/no-such-prefix",
                                 f"s3://{BUCKET}/{PREFIX}/part-9.parquet",
                                 "s3://no-such-bucket/data"])
def test_missing_object_or_bucket_fails_at_once(proxy, src):
    start = time.monotonic()
    with pytest.raises(DatasetNotFoundError, match="no such file or directory") as info:
        # rank/world_size given: no torch.distributed import inside the timed call.
        stoker.Loader(src, storage_options=s3_options(proxy), retry_base_delay=3.0, rank=0,
                      world_size=1)
    assert time.monotonic() - start < 1.5  # a retry would sleep at least 1.5 s
    assert src in str(info.value)
    assert not any(r.status >= 500 for r in proxy.log())


@pytest.mark.timeout(30)
def test_access_denied_fails_at_once_without_the_secret(proxy):
    proxy.inject("403", -1)
    options = s3_options(proxy, session_token=SESSION_TOKEN)
    start = time.monotonic()
    with pytest.raises(StorageError, match="access denied") as info:
        stoker.Loader(source(), storage_options=options, retry_base_delay=3.0, rank=0,
                      world_size=1)
    assert time.monotonic() - start < 1.5
    assert len(proxy.log()) == 1  # not retried
    assert isinstance(info.value, OSError)
    assert SECRET_KEY not in str(info.value) and SESSION_TOKEN not in str(info.value)


# -------------------------------------------------------------------------- server gone


@pytest.mark.timeout(30)
def test_server_down_at_open_fails_in_bounded_time(proxy):
    endpoint = proxy.endpoint
    proxy.close()
    options = dict(s3_options(proxy), endpoint_override=endpoint)
    start = time.monotonic()
    with pytest.raises(StorageError, match="after 2 retries") as info:
        stoker.Loader(source(), storage_options=options, max_retries=2, retry_base_delay=0.05)
    assert time.monotonic() - start < 5
    assert "Could not connect" in str(info.value) or "NETWORK_CONNECTION" in str(info.value)


@pytest.mark.timeout(60)
def test_server_down_mid_epoch_stops_with_an_error(proxy):
    loader = stoker.Loader(source(), storage_options=s3_options(proxy), max_retries=2,
                           retry_base_delay=0.05, batch_size=50, num_threads=1,
                           prefetch_bytes="16KiB", shuffle=False)
    start = None
    batches = 0
    total = len(loader)
    with loader, pytest.raises(OSError, match="after 2 retries"):
        for _ in loader:
            batches += 1
            if batches == 1:
                proxy.close()
                start = time.monotonic()
    assert 1 <= batches < total
    assert time.monotonic() - start < 10


# --------------------------------------------------------------------- listing and footers


@pytest.mark.timeout(60)
def test_listing_and_footers_read_once_per_loader(moto, proxy):
    # drop_last=False: every row group is one whole segment. (With drop_last under shuffling the
    # epoch starts at a random row, so one row group is read for its tail first and its head
    # last: cpp/src/plan/README.md.)
    loader = stoker.Loader(source(), storage_options=s3_options(proxy), num_threads=4,
                           num_io_threads=4, batch_size=256, seed=9, drop_last=False)
    opened = proxy.log()
    lists = [r for r in opened if "list-type=2" in r.query and "max-keys=1000" in r.query]
    assert len(lists) == 1
    footer_ranges = {}
    for key in moto.keys:
        gets = gets_of(opened, "/" + key)
        assert len(gets) == 1, f"{key}: {[(g.method, g.range) for g in gets]}"
        assert gets[0].range  # a ranged read of the tail, not the whole object by default
        footer_ranges[key] = gets[0].range
        # Sizes come from the listing: no HEAD per file.
        assert not [r for r in opened if r.method == "HEAD" and r.path.endswith(key)]
    proxy.clear()
    with loader:
        for epoch in range(2):
            loader.set_epoch(epoch)
            assert sum(len(b["id"]) for b in loader) > 0
    reads = proxy.log()
    assert reads and all(r.method == "GET" and r.range for r in reads)
    assert not [r for r in reads if "list-type" in r.query]
    for key, rng in footer_ranges.items():
        assert not [r for r in gets_of(reads, "/" + key) if r.range == rng]
    # The column chunks of a row group are coalesced: one GET per row group and epoch, and one
    # more per task of the epoch's head (its first batch, cut from the first row group, read
    # alone and split among the 4 workers: a task per column up to 4).
    files = [pq.ParquetFile(os.path.join(moto.local_dir, os.path.basename(key)))
             for key in moto.keys]
    row_groups = sum(f.num_row_groups for f in files)
    head_tasks = min(4, len(files[0].schema_arrow))
    assert len(reads) == 2 * (row_groups + head_tasks)


# ---------------------------------------------------------------------------- no secrets


@pytest.mark.timeout(60)
def test_credentials_never_appear(moto, proxy, capfd):
    texts = []
    options = s3_options(proxy, session_token=SESSION_TOKEN)
    with stoker.Loader(source(), storage_options=options, batch_size=1000) as loader:
        texts += [repr(loader), stats_text(loader), str(loader.columns)]
        for _ in loader:
            pass
        texts.append(stats_text(loader))
    for fault in ("403", "503"):
        proxy.inject(fault, -1)
        with pytest.raises(OSError) as info:
            stoker.Loader(source(), storage_options=options, max_retries=1,
                          retry_base_delay=0.01)
        texts.append(str(info.value))
        proxy.clear()
    # Credentials in the URI's user info.
    with_userinfo = f"s3://{ACCESS_KEY}:{SECRET_KEY}@{BUCKET}/nothing-here"
    with pytest.raises(DatasetNotFoundError) as info:
        stoker.Loader(with_userinfo, storage_options=dict(
            endpoint_override=proxy.endpoint, scheme="http", region=REGION))
    texts.append(str(info.value))
    proxy.inject("503", -1)
    with pytest.raises(StorageError) as info:
        stoker.Loader(with_userinfo, storage_options=dict(
            endpoint_override=proxy.endpoint, scheme="http", region=REGION), max_retries=0)
    texts.append(str(info.value))
    with pytest.raises(InvalidOptionError) as info:
        stoker.Loader(with_userinfo + "?bogus=1")
    texts.append(str(info.value))
    # A URI Arrow cannot parse: its message quotes the URI as typed.
    with pytest.raises(InvalidOptionError, match="Cannot parse URI") as info:
        stoker.Loader(f"s3://{ACCESS_KEY}:{SECRET_KEY}%zz@{BUCKET}/x")
    texts.append(str(info.value))
    out, err = capfd.readouterr()
    texts += [out, err]
    assert len(texts) == 12 and all(isinstance(t, str) for t in texts)
    for text in texts:
        assert SECRET_KEY not in text
        assert SESSION_TOKEN not in text


# ------------------------------------------------------------------------ interpreter exit


@pytest.mark.timeout(120)
@pytest.mark.parametrize("late_import", [
    False, True])
def test_exit_with_a_running_s3_loader(proxy, late_import):
    script = textwrap.dedent(f"""
        import stoker
        options = dict(endpoint_override={proxy.endpoint!r}, scheme="http", region="us-east-1",
                       access_key="AKIAEXIT", secret_key="exit-secret")
        loader = stoker.Loader({source()!r}, storage_options=options, batch_size=10,
                               num_threads=2, prefetch_bytes=4096)
        batches = iter(loader)
        next(batches)
        if {late_import!r}:
            import pyarrow.fs  # registers pyarrow's S3 finaliser after stoker's atexit hook
        print("leaving", flush=True)
    """)
    proxy.inject("delay", -1, delay_s=0.2)  # requests are in flight at exit
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "leaving" in result.stdout
    assert "Segmentation" not in result.stderr


@pytest.mark.timeout(60)
def test_s3_is_finalised_at_exit(proxy):
    script = textwrap.dedent(f"""
        import stoker
        options = dict(endpoint_override={proxy.endpoint!r}, scheme="http", region="us-east-1",
                       access_key="AKIAEXIT", secret_key="exit-secret")
        with stoker.Loader({source()!r}, storage_options=options) as loader:
            pass
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60, env=env)
    assert result.returncode == 0
    assert "FinalizeS3 was not called" not in result.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("credentials", ["keys", "anonymous"])
def test_explicit_credentials_never_ask_the_instance_metadata_service(moto, credentials):
    """Without user info in the URI, Arrow's S3Options::FromUri built the AWS SDK's default
    credentials chain, which asked the instance-metadata service for credentials and the region
    (7 requests; 14.5 s where a listener never answers) before the storage_options' credentials
    replaced it. A fake metadata service on loopback (AWS_EC2_METADATA_SERVICE_ENDPOINT, the
    probe not disabled) counts the requests of a fresh process: none with explicit credentials;
    pyarrow's own from_uri in the same setting shows the fake service is asked (the test's check
    of itself)."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    asked = []

    def serve():
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            with client:
                asked.append(client.recv(4096).split(b"\r\n")[0])
                client.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
                               b"Connection: close\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if k != "AWS_EC2_METADATA_DISABLED"}
    env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = f"http://127.0.0.1:{server.getsockname()[1]}"
    options = s3_options(moto)
    if credentials == "anonymous":
        options = {k: v for k, v in options.items() if k not in ("access_key", "secret_key")}
        options["anonymous"] = True
    # moto refuses anonymous reads: that loader stops at the first footer, after S3's set-up.
    read = textwrap.dedent(f"""
        import stoker
        try:
            loader = stoker.Loader({source()!r}, storage_options={options!r}, batch_size=100)
            print(sum(len(b["id"]) for b in loader))
        except stoker.errors.StorageError as error:
            assert "access denied" in str(error), error
            print(-1)
    """)
    try:
        out = subprocess.run([sys.executable, "-c", read], env=env, capture_output=True,
                             text=True, timeout=100)
        assert out.returncode == 0, out.stderr[-3000:]
        assert int(out.stdout) == (sum(FILE_ROWS) if credentials == "keys" else -1)
        assert asked == []
        probe = ("import pyarrow.fs as fs; fs.FileSystem.from_uri("
                 f"'s3://{BUCKET}/?region={REGION}&endpoint_override={moto.endpoint}&scheme=http')")
        subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, timeout=100)
        assert asked, "the fake metadata service was never asked: the test proves nothing"
    finally:
        server.close()
