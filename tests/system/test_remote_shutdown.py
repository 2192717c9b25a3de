"""Shutdown and exit with S3 requests in flight, against a server in its own process.

moto and the fault proxy run in a child process (conftest.py's ``s3_process``), so the server
keeps stalling, freezing or stays dead while the process under test closes its loader and
exits; the process under test is a fresh interpreter per run (a crash at exit is its exit code).
Each scenario runs a few times: the crashes these tests guard against depended on timing
(issue 23, items 1 and 7). No timing assertions: a scenario that hangs fails by its timeout.

The crash at exit (23.1) came from a fetch-ahead read that kept retrying after close(): its next
attempt ran while exit() destroyed Arrow's static objects (the memory pool it allocates the
buffer from). Every scenario here uses a 1 to 2 s first backoff (retry_base_delay=2), so a
retry's sleep spans the end of the interpreter's finalisation however fast or loaded the machine
is; and requests are slow (delayed, frozen, slow errors), so some are under way at close().
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3_fixtures import dataset_folder, moto_available, s3_options

pytestmark = [pytest.mark.skipif(not moto_available(), reason="needs moto[server] and boto3"),
              pytest.mark.usefixtures("hermetic_aws_env")]  # conftest.py

BUCKET = "bkt"
PREFIX = "tab"
FILES = 4
ROW_GROUPS = 4
GROUP_ROWS = 16384
# Requests of Loader(...): one listing and one footer read per file.
OPEN_REQUESTS = 1 + FILES
REPEATS = 3
RUN_TIMEOUT_S = 60


def write_table(folder: str) -> None:
    os.makedirs(folder, exist_ok=True)
    for f in range(FILES):
        rows = ROW_GROUPS * GROUP_ROWS
        ids = pa.array(range(f * rows, (f + 1) * rows), pa.int64())
        payload = pa.array([float(i % 97) for i in range(rows)], pa.float64())
        pq.write_table(pa.table({"id": ids, "x": payload}),
                       os.path.join(folder, f"part-{f}.parquet"), row_group_size=GROUP_ROWS)


s3_data = dataset_folder(BUCKET, PREFIX, write_table)

PRELUDE = """
import os, signal, sys, time
# A process started in the background by a non-interactive shell has SIGINT ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)
import stoker
from stoker.errors import StorageError
options = {options!r}
source = {source!r}

def wait_for_go():
    print("ready", flush=True)
    sys.stdin.readline()  # the test has checked the server's side

"""


def start(server, body: str, **storage: str) -> subprocess.Popen:
    script = PRELUDE.format(options=s3_options(server, **storage),
                            source=f"s3://{BUCKET}/{PREFIX}") + textwrap.dedent(body)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), PYTHONFAULTHANDLER="1")
    return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_ready(proc: subprocess.Popen) -> None:
    line = proc.stdout.readline()  # a script that hangs here fails by the test's timeout
    if line.strip() != "ready":
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
        pytest.fail(f"the script did not get ready: {line}{out}\n{err[-3000:]}")


def finish(proc: subprocess.Popen) -> str:
    """Lets the script go on (close, exit) and checks that it exited cleanly."""
    try:
        out, err = proc.communicate("go\n", timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the script hung:\n{out}\n{err[-3000:]}")
    assert "Segmentation fault" not in err and "Fatal Python error" not in err, err[-3000:]
    assert proc.returncode == 0, f"rc={proc.returncode}\n{out}\n{err[-3000:]}"
    assert "OK" in out, out + err[-3000:]
    return out


def after_the_first_file(server, kind: str, **fault) -> None:
    """`kind` for every request of the files after the first, except their footer reads: the
    loader opens, the first batch (unshuffled: from the first file) arrives, and the fetch stage
    then has requests for the next file under way, whatever order they reach the server in."""
    for f in range(1, FILES):
        server.inject(kind, -1, path=f"part-{f}.parquet", after=1, **fault)


def in_flight_at_the_server(server, proc: subprocess.Popen) -> None:
    if not server.wait_in_flight(1, timeout=30):
        proc.kill()
        pytest.fail("no request was in flight at the server: the scenario tests nothing")


NEXT_CLOSE_EXIT = """
L = stoker.Loader(source, batch_size=4096, shuffle=False, columns=["id"],
                  storage_options=options, retry_base_delay=2.0)
it = iter(L)
next(it)
wait_for_go()
if {close}:
    started = time.monotonic()
    L.close()
    print(f"close took {{time.monotonic() - started:.2f}} s", flush=True)
print("OK", flush=True)
"""


@pytest.mark.timeout(REPEATS * RUN_TIMEOUT_S + 60)
@pytest.mark.parametrize("close", [True, False], ids=["close", "no-close"])
def test_close_and_exit_with_requests_stalled_past_the_timeout(s3_process, close):
    # The first requests pass, then every request is held 3 s past the client's timeout.
    for _ in range(REPEATS):
        s3_process.clear()
        after_the_first_file(s3_process, "delay", delay_s=4.0)
        proc = start(s3_process, NEXT_CLOSE_EXIT.format(close=close), request_timeout="1")
        wait_ready(proc)
        in_flight_at_the_server(s3_process, proc)
        finish(proc)


@pytest.mark.timeout(REPEATS * RUN_TIMEOUT_S + 60)
def test_close_and_exit_with_a_frozen_server(s3_process):
    # Requests are read and never answered; only the client's timeout ends them.
    for _ in range(REPEATS):
        s3_process.clear()
        after_the_first_file(s3_process, "freeze")
        proc = start(s3_process, NEXT_CLOSE_EXIT.format(close=True), request_timeout="2")
        wait_ready(proc)
        in_flight_at_the_server(s3_process, proc)
        finish(proc)


@pytest.mark.timeout(REPEATS * RUN_TIMEOUT_S + 60)
def test_close_and_exit_after_the_server_was_killed(s3_data, tmp_path):
    from s3_fixtures import S3ServerProcess

    for attempt in range(REPEATS):
        server = S3ServerProcess(s3_data.local_dir, BUCKET, PREFIX,
                                 log_path=str(tmp_path / f"s3-server-{attempt}.log"))
        try:
            # Slow requests, so some are in flight when the server dies.
            after_the_first_file(server, "delay", delay_s=1.0)
            proc = start(server, NEXT_CLOSE_EXIT.format(close=True), request_timeout="5")
            wait_ready(proc)
            in_flight_at_the_server(server, proc)
            server.kill()  # SIGKILL: connections reset, then refused
            finish(proc)
        finally:
            server.close()


@pytest.mark.timeout(REPEATS * RUN_TIMEOUT_S + 60)
def test_exit_after_a_storage_error_from_persistent_503(s3_process):
    # Mid-epoch, every request gets 503 SlowDown: the epoch fails with StorageError, which the
    # program catches; other fetch requests are still retrying when it exits.
    body = """
        L = stoker.Loader(source, batch_size=4096, shuffle=False, columns=["id"], num_threads=2,
                          prefetch_bytes="1MiB", storage_options=options, retry_base_delay=2.0,
                          max_retries=2)
        wait_for_go()
        try:
            for batch in L:
                pass
        except StorageError:
            print("caught StorageError", flush=True)
        print("OK", flush=True)
    """
    for _ in range(REPEATS):
        s3_process.clear()
        after_the_first_file(s3_process, "503", delay_s=0.3)
        proc = start(s3_process, body)
        wait_ready(proc)
        out = finish(proc)
        assert "caught StorageError" in out


@pytest.mark.timeout(REPEATS * RUN_TIMEOUT_S + 60)
def test_break_and_close_on_a_slow_link(s3_process):
    body = """
        L = stoker.Loader(source, batch_size=4096, seed=4, columns=["id"], storage_options=options,
                          retry_base_delay=2.0)
        for i, batch in enumerate(L):
            if i == 1:
                wait_for_go()  # with requests under way
                break
        L.close()
        print("OK", flush=True)
    """
    for _ in range(REPEATS):
        s3_process.clear()
        s3_process.inject("delay", -1, after=OPEN_REQUESTS, delay_s=0.5)  # below the timeout
        proc = start(s3_process, body, request_timeout="3")
        wait_ready(proc)
        in_flight_at_the_server(s3_process, proc)
        finish(proc)


# ---- issue 23.7: Ctrl-C while Loader(...) waits for a stalled server --------------------------

INTERRUPTED_OPEN = """
print("opening", flush=True)
started = time.monotonic()
try:
    stoker.Loader(source, batch_size=4096, storage_options=options, max_retries=20,
                  retry_base_delay={base_delay})
    print("opened", flush=True)
except KeyboardInterrupt:
    print(f"KeyboardInterrupt after {{time.monotonic() - started:.2f}} s", flush=True)
print("OK", flush=True)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("stall", ["listing", "footers", "backoff"])
def test_ctrl_c_interrupts_open_on_a_stalled_server(s3_process, stall):
    # Without interruption each scenario takes minutes (20 retries of 5 s timeouts or of 5 s
    # backoff sleeps), so the run's timeout, not a time assertion, catches a deferred Ctrl-C.
    # The interrupt itself takes about 0.25 s; the exit then waits for a request still under way
    # (frozen: up to its 5 s request_timeout), which pyarrow's S3 finaliser waits for anyway.
    if stall == "listing":
        s3_process.inject("freeze", -1)
    elif stall == "footers":
        s3_process.inject("freeze", -1, after=1)  # the listing passes
    else:
        s3_process.inject("503", -1)
    proc = start(s3_process, INTERRUPTED_OPEN.format(base_delay=5.0 if stall == "backoff" else 0.1),
                 request_timeout="5")
    assert proc.stdout.readline().strip() == "opening"
    if stall == "backoff":
        # The first 503 has been answered: the open sleeps 2.5 to 5 s before its retry.
        deadline = time.monotonic() + 30
        while not s3_process.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s3_process.log(), "the open sent no request"
    else:
        in_flight_at_the_server(s3_process, proc)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"Ctrl-C did not interrupt Loader(...):\n{out}\n{err[-3000:]}")
    assert "KeyboardInterrupt after" in out, out + err[-3000:]
    assert "opened" not in out
    assert proc.returncode == 0, err[-3000:]
    assert "Segmentation fault" not in err and "RuntimeError" not in err, err[-3000:]
