"""Secrets never leave the process (issue 15).

A matrix over every place stoker writes text (Loader errors at open and mid-epoch with their
exception chains, ``repr``, ``stats()``, ``state_dict()``, ``columns``, ``describe``, cache files
and ``stoker cache stats``, ``stoker inspect`` (text and ``--json``), ``stoker bench`` with its
progress bar, the benchmark reports) x every way of passing credentials (URI user info, URI query,
``storage_options``, AWS environment variables, AWS credentials and config files) x the server up
and down: the secret and the session token appear nowhere, neither in stdout, stderr, files
written nor exception chains. Loopback moto behind the fault proxy of tests/s3_fixtures.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import traceback
from typing import List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker.__main__ import main

from s3_fixtures import ACCESS_KEY, REGION, SECRET_KEY, SESSION_TOKEN, FaultProxy
from s3_fixtures import isolate_aws_env, moto_available, serving_dir

pytestmark = pytest.mark.skipif(not moto_available(), reason="needs moto[server] and boto3")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BUCKET = "stoker-secrets"
PREFIX = "ds"
SECRETS = (SECRET_KEY, SESSION_TOKEN)
WAYS = ["userinfo", "query", "storage_options", "env", "credentials_file", "config_file"]
# The ways a Loader accepts and the test server answers (Arrow refuses credentials in a query).
WORKING = {"userinfo", "storage_options", "env", "credentials_file", "config_file"}
FAST_FAIL = dict(max_retries=0, retry_base_delay=0.01)


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    local = tmp_path_factory.mktemp("secrets") / PREFIX
    local.mkdir()
    for f in range(2):
        table = pa.table({"x": np.arange(60, dtype=np.float32) + f,
                          "label": np.arange(60, dtype=np.int64)})
        pq.write_table(table, local / f"part-{f}.parquet", row_group_size=20)
    with serving_dir(str(local), BUCKET, PREFIX) as server:
        yield server


@pytest.fixture(scope="module")
def proxy(moto):
    p = FaultProxy(moto.host, moto.port)
    yield p
    p.close()


@pytest.fixture(scope="module")
def down_endpoint():
    """A loopback port nothing listens on: connections are refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"127.0.0.1:{port}"


@pytest.fixture(autouse=True)
def hermetic_aws_env(monkeypatch, tmp_path, proxy):
    isolate_aws_env(monkeypatch, tmp_path)
    proxy.clear()
    yield
    proxy.clear()


def configure(way: str, endpoint: str, monkeypatch, tmp_path):
    """(source URI, storage_options) passing the credentials `way`; sets env or files as needed."""
    where = f"endpoint_override={endpoint}&scheme=http&region={REGION}"
    plain = f"s3://{BUCKET}/{PREFIX}?{where}"
    if way == "userinfo":
        return f"s3://{ACCESS_KEY}:{SECRET_KEY}@{BUCKET}/{PREFIX}?{where}", None
    if way == "query":
        return f"{plain}&access_key={ACCESS_KEY}&secret_key={SECRET_KEY}" \
               f"&session_token={SESSION_TOKEN}", None
    if way == "storage_options":
        return f"s3://{BUCKET}/{PREFIX}", dict(
            endpoint_override=endpoint, scheme="http", region=REGION, access_key=ACCESS_KEY,
            secret_key=SECRET_KEY, session_token=SESSION_TOKEN)
    if way == "env":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION_TOKEN)
        return plain, None
    profile = (f"aws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"
               f"aws_session_token = {SESSION_TOKEN}\n")
    aws = tmp_path / "aws"  # the user's own files, not written by stoker: not scanned
    aws.mkdir()
    if way == "credentials_file":
        path = aws / "credentials"
        path.write_text("[default]\n" + profile)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(path))
        return plain, None
    assert way == "config_file"
    path = aws / "config"
    path.write_text("[default]\n" + profile + f"region = {REGION}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(path))
    return plain, None


def chain(error: BaseException) -> str:
    """The whole exception chain as Python prints it."""
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))


def assert_clean(texts: List[str], files_under: Optional[str] = None) -> None:
    assert texts and all(isinstance(t, str) for t in texts)
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"secret leaked in: {text[:2000]}"
    if files_under is not None:
        for folder, dirs, names in os.walk(files_under):
            dirs[:] = [d for d in dirs if not (folder == files_under and d == "aws")]
            for name in names:
                path = os.path.join(folder, name)
                with open(path, "rb") as f:
                    data = f.read()
                for secret in SECRETS:
                    assert secret not in path
                    assert secret.encode() not in data, f"secret in {path}"


# ------------------------------------------------------------------------------ Python API


@pytest.mark.timeout(60)
@pytest.mark.parametrize("way", WAYS)
def test_python_api_server_up(way, proxy, monkeypatch, tmp_path, capfd):
    uri, options = configure(way, proxy.endpoint, monkeypatch, tmp_path)
    cache = tmp_path / "cache"
    texts = []
    if way not in WORKING:
        with pytest.raises(stoker.errors.InvalidOptionError) as info:
            stoker.Loader(uri, storage_options=options, **FAST_FAIL)
        texts.append(chain(info.value))
        with pytest.raises(stoker.errors.InvalidOptionError) as info:
            stoker.describe(uri, storage_options=options, **FAST_FAIL)
        texts.append(chain(info.value))
        assert "secret_key" in texts[0]  # the error names the parameter, not its value
    else:
        description = stoker.describe(uri, storage_options=options, **FAST_FAIL)
        assert len(description.files) == 2
        texts += [f.path for f in description.files]
        texts += [c.error for c in description.columns]
        with stoker.Loader(uri, storage_options=options, batch_size=10, num_threads=1,
                           cache_dir=str(cache), **FAST_FAIL) as loader:
            texts += [repr(loader), str(loader.stats()), str(loader.columns)]
            rows = sum(len(batch["x"]) for batch in loader)
            assert rows == 120
            texts += [str(loader.stats()), json.dumps(loader.state_dict())]
        assert main(["cache", "stats", str(cache)]) == 0
        assert main(["cache", "stats", str(cache), "--json"]) == 0
        # Mid-epoch: the server fails every request after the loader opened.
        loader = stoker.Loader(uri, storage_options=options, batch_size=10, num_threads=1,
                               **FAST_FAIL)
        proxy.inject("500", -1)
        with pytest.raises(stoker.StokerError) as info:
            for _ in loader:
                pass
        texts += [chain(info.value), repr(loader), str(loader.stats()),
                  json.dumps(loader.state_dict())]
        loader.close()
        # The secret was really in use: every request was signed with its key.
        assert {r.access_key for r in proxy.log()} == {ACCESS_KEY}
        proxy.clear()
    out, err = capfd.readouterr()
    texts += [out, err]
    assert_clean(texts, files_under=str(tmp_path))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("way", WAYS)
def test_python_api_server_down(way, down_endpoint, monkeypatch, tmp_path, capfd):
    uri, options = configure(way, down_endpoint, monkeypatch, tmp_path)
    texts = []
    for call in (lambda: stoker.Loader(uri, storage_options=options, cache_dir=str(tmp_path / "c"),
                                       **FAST_FAIL),
                 lambda: stoker.describe(uri, storage_options=options, **FAST_FAIL)):
        with pytest.raises(stoker.StokerError) as info:
            call()
        texts.append(chain(info.value))
        if way in WORKING:
            assert isinstance(info.value, stoker.errors.StorageError)
            assert f"s3://{BUCKET}/{PREFIX}" in str(info.value)  # the source, redacted
    out, err = capfd.readouterr()
    assert_clean(texts + [out, err], files_under=str(tmp_path))


# ---------------------------------------------------------------------------- command line

CLI_WAYS = [w for w in WAYS if w != "storage_options"]  # the CLI takes credentials in the URI
# or from AWS's environment and files only


@pytest.mark.timeout(90)
@pytest.mark.parametrize("up", [True, False], ids=["up", "down"])
@pytest.mark.parametrize("way", CLI_WAYS)
def test_cli_inspect_and_bench(way, up, proxy, down_endpoint, monkeypatch, tmp_path, capfd):
    uri, _ = configure(way, proxy.endpoint if up else down_endpoint, monkeypatch, tmp_path)
    expected = 0 if up and way in WORKING else 2
    codes = [main(["inspect", uri]), main(["inspect", uri, "--json"]),
             main(["bench", uri, "--batches", "3", "--batch-size", "10", "--num-threads", "1"])]
    out, err = capfd.readouterr()
    assert codes == [expected] * 3, err
    if expected == 0:
        first = out.splitlines()[0]
        assert first == f"dataset s3://{BUCKET}/{PREFIX}"  # shown, redacted
        assert "rows/s" in out
    else:
        assert err.count("stoker: error:") == 3
    assert_clean([out, err], files_under=str(tmp_path))


@pytest.mark.timeout(60)
def test_cli_subprocess_userinfo(proxy, down_endpoint, tmp_path):
    """The real process's stdout and stderr, server up and down."""
    env = dict(os.environ, AWS_EC2_METADATA_DISABLED="true")
    for endpoint, code in ((proxy.endpoint, 0), (down_endpoint, 2)):
        uri = (f"s3://{ACCESS_KEY}:{SECRET_KEY}@{BUCKET}/{PREFIX}?endpoint_override={endpoint}"
               f"&scheme=http&region={REGION}")
        proc = subprocess.run([sys.executable, "-m", "stoker", "inspect", uri], env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == code, proc.stderr
        assert (f"s3://{BUCKET}/{PREFIX}" in proc.stdout) == (code == 0)
        assert_clean([proc.stdout, proc.stderr])


# -------------------------------------------------------------------------- bench reports


def test_bench_reports_redact_sources_and_secrets(tmp_path):
    """The suite's report (bench/report.py write_all: JSON, Markdown) and bench/remote.py's
    redaction of worker results show sources as stoker does, whatever a run recorded."""
    sys.path.insert(0, ROOT)
    try:
        from bench.report import redacted, write_all
    finally:
        sys.path.remove(ROOT)
    source = f"s3://{ACCESS_KEY}:{SECRET_KEY}@{BUCKET}/{PREFIX}?session_token={SESSION_TOKEN}"
    with open(os.path.join(ROOT, "bench", "results", "quick.json")) as f:
        report = json.load(f)  # a real report of the suite, with a remote source recorded
    workload = next(iter(report["workloads"].values()))
    workload["dataset"]["path"] = source
    run = next(iter(workload["results"].values()))
    run["status"] = f"unavailable: cannot read '{source}': server down"
    written = write_all(report, str(tmp_path / "out"), "report")
    assert {os.path.basename(p) for p in written} >= {"report.json", "report.md"}
    with open(tmp_path / "out" / "report.json") as f:
        saved = json.load(f)
    assert next(iter(saved["workloads"].values()))["dataset"]["path"] == f"s3://{BUCKET}/{PREFIX}"
    assert_clean([json.dumps(saved)], files_under=str(tmp_path / "out"))
    # bench/remote.py passes the storage secrets it gave its workers: bare secrets go too.
    worker_result = {"error": f"unavailable: exit 1: denied for {SECRET_KEY} at '{source}'"}
    clean = redacted(worker_result, [SECRET_KEY])
    assert clean["error"] == f"unavailable: exit 1: denied for *** at 's3://{BUCKET}/{PREFIX}'"


def test_redact_uri_is_the_engines():
    assert stoker.redact_uri(f"s3://{ACCESS_KEY}:{SECRET_KEY}@b/k?secret_key=x") == "s3://b/k"
    assert stoker.redact_uri("/local/path?x") == "/local/path?x"
    from stoker._redact import redact_text

    text = f"a 'gs://u:{SECRET_KEY}@b/o?token=1' and {SESSION_TOKEN}"
    assert redact_text(text, [SESSION_TOKEN]) == "a 'gs://b/o' and ***"
    # The engine's own message for a URI it cannot parse is redacted the same way.
    with pytest.raises(stoker.errors.InvalidOptionError) as info:
        stoker.describe(f"s3://{ACCESS_KEY}:{SECRET_KEY}%zz@{BUCKET}/x")
    assert_clean([chain(info.value)])
