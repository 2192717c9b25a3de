"""Redaction by structure, against real S3 errors (issue 22.7).

A secret key of one to four characters occurs inside the words of almost any message: with
``secret_key="b"`` an S3 error read ``in ***ucket '***ucket-data' ... HeadO***ject``, with LocalStack's
``"test"`` ``'***-data'``. Moto serves the buckets ``bucket-data`` and ``test-data`` behind the fault
proxy of tests/s3_fixtures.py; for each error (at open and mid-epoch, server answering 403, 404 or
500) the message with a short secret taken from inside the message's own words must be the message
with a long secret that occurs nowhere. A secret that is a whole token of the message is still
redacted (tests/unit/remote/test_secrets.py keeps every leak test).
"""

from __future__ import annotations

import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker._redact import redact_text, redact_value

from s3_fixtures import ACCESS_KEY, REGION, moto_available, serving_dir

# conftest.py's `proxy` (a FaultProxy in front of this module's `moto`) and `hermetic_aws_env`.
pytestmark = [pytest.mark.skipif(not moto_available(), reason="needs moto[server] and boto3"),
              pytest.mark.usefixtures("hermetic_aws_env")]

LONG = "Zq9-not-in-any-message-Zq9"
FAST = dict(max_retries=0, retry_base_delay=0.01, num_threads=1, shuffle=False, batch_size=10)


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    local = tmp_path_factory.mktemp("words") / "ds"
    local.mkdir()
    pq.write_table(pa.table({"x": np.arange(100, dtype=np.float32)}), str(local / "a.parquet"),
                   row_group_size=10)
    with serving_dir(str(local), "bucket-data", "ds") as server:
        server.create_bucket("test-data")
        server.upload_dir(str(local), "test-data", "ds")
        yield server


def s3_error(proxy, bucket: str, secret: str, fault: str, when: str, userinfo: bool) -> str:
    """The StorageError's message for `fault` answered at open or mid-epoch, with `secret` as the
    secret key (in storage_options, or in the URI's user info)."""
    where = f"endpoint_override={proxy.endpoint}&scheme=http&region={REGION}"
    if userinfo:
        uri, options = f"s3://{ACCESS_KEY}:{secret}@{bucket}/ds/a.parquet?{where}", None
    else:
        uri = f"s3://{bucket}/ds/a.parquet"
        options = dict(endpoint_override=proxy.endpoint, scheme="http", region=REGION,
                       access_key=ACCESS_KEY, secret_key=secret)
    proxy.clear()
    try:
        if when == "open":
            proxy.inject(fault, -1)
            with pytest.raises(stoker.errors.StorageError) as info:
                stoker.Loader(uri, storage_options=options, **FAST)
            return str(info.value)
        loader = stoker.Loader(uri, storage_options=options, **FAST)
        proxy.inject(fault, -1, method="GET")
        with pytest.raises(stoker.errors.StorageError) as info:
            for _ in loader:
                pass
        loader.close()
        return str(info.value)
    finally:
        proxy.clear()


def normal(message: str) -> str:
    """Without what varies between two runs of one error (timings, byte ranges, row groups)."""
    return re.sub(r"\d+(\.\d+)?", "N", message)


def inner_pieces(message: str, limit: int = 12) -> list:
    """1- to 4-letter pieces of the message's words that are never a whole word of it."""
    words = set(re.findall(r"[A-Za-z0-9]+", message))
    pieces = []
    for word in sorted(words):
        for size in (1, 2, 3, 4):
            for start in (0, len(word) // 2, len(word) - size):
                piece = word[start:start + size]
                if (len(piece) == size and piece.isalpha() and piece not in words and
                        piece not in pieces):
                    pieces.append(piece)
    step = max(1, len(pieces) // limit)
    return pieces[::step][:limit]


CASES = [("403", "open"), ("404", "open"), ("500", "open"), ("403", "mid-epoch")]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("userinfo", [False, True], ids=["storage_options", "userinfo"])
@pytest.mark.parametrize("fault,when", CASES)
def test_short_secrets_inside_words_leave_s3_errors_alone(proxy, fault, when, userinfo):
    for bucket, named in (("bucket-data", ["b", "bu", "ucke"]), ("test-data", ["test", "t", "te"])):
        baseline = s3_error(proxy, bucket, LONG, fault, when, userinfo)
        assert bucket in baseline and "***" not in baseline, baseline
        for secret in named + inner_pieces(baseline):
            message = s3_error(proxy, bucket, secret, fault, when, userinfo)
            assert "***" not in message, (secret, message)
            assert normal(message) == normal(baseline), secret


@pytest.mark.timeout(60)
def test_whole_token_secrets_are_still_redacted(proxy):
    """A secret that stands as a whole token of a real message goes, short or not."""
    baseline = s3_error(proxy, "bucket-data", LONG, "403", "open", False)
    assert "ACCESS_DENIED" in baseline
    message = s3_error(proxy, "bucket-data", "ACCESS_DENIED", "403", "open", False)
    assert "ACCESS_DENIED" not in message and "AWS Error *** during" in message
    # The secrets where they are whole tokens: quoted, in a URI, in a repr of options.
    for secret in ("b", "test"):
        text = (f"secret_key {secret} in 's3://{ACCESS_KEY}:{secret}@bucket-data/ds' and "
                f"{{'secret_key': '{secret}', 'region': 'r'}} and ({secret}).")
        redacted = redact_text(text, [secret])
        assert re.search(r"(?<![A-Za-z0-9_-])" + secret + r"(?![A-Za-z0-9_-])", redacted) is None
        assert "bucket-data" in redacted and "secret_key" in redacted
        assert redacted.count("***") == 3


def test_python_and_engine_share_one_rule():
    """stoker._redact has no rule of its own: its output is the engine's for any text."""
    text = ("HeadObject in bucket 'bucket-data' for https://h/p?X-Amz-Signature=abc&x=1 "
            "with {'session_token': 'tok'} and b")
    assert redact_text(text, ["b"]) == stoker._redact._stoker.redact_secrets(text, ["b"])
    assert redact_text(text, ["b"]).endswith("and ***")
    assert "X-Amz-Signature" not in redact_text(text) and "abc" not in redact_text(text)
    assert "'session_token': '***'" in redact_text(text)
    assert redact_value({"e": [text]}, ["b"]) == {"e": [redact_text(text, ["b"])]}
    assert os.fspath(stoker.redact_uri("s3://k:b@bucket-data/x?y=1")) == "s3://bucket-data/x"
