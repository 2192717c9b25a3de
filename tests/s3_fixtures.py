"""Loopback S3 for tests: a moto server and a fault-injecting HTTP proxy in front of it.

Everything binds 127.0.0.1 on an ephemeral port. Objects are uploaded with boto3 straight to moto;
the loader under test talks to the proxy, which forwards each request on a fresh upstream
connection and can instead answer 503 SlowDown / 403 / 500, drop the connection, delay, or freeze
(read the request, never answer), for the next N matching requests (optionally after letting the
first M pass). Every request is recorded (method, path, Range header, status) so tests can count.

Two ways to run them:

- in daemon threads of the test process (MotoServer, FaultProxy; the AWS SDK is not fork-safe, so
  never fork after a loader ran): cheap, for tests that only look at what the loader does;
- in their own process (S3ServerProcess: this file run as a script, controlled over a small HTTP
  endpoint): for tests of shutdown and exit, where the server must outlive, stall or die
  independently of the process under test (an in-process server stops with it, first).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import select
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

ACCESS_KEY = "AKIATESTSTOKER000001"
# Distinctive so a leak is easy to grep for.
SECRET_KEY = "s3cr3t-Stoker-Do-Not-Leak-9f8e7d6c5b4a"
SESSION_TOKEN = "t0ken-Stoker-Do-Not-Leak-1a2b3c4d5e6f"
REGION = "us-east-1"

_SOCKET_TIMEOUT_S = 20.0
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on with 0 s: close() sends RST
_MAX_HEADER_BYTES = 64 << 10


def moto_available() -> bool:
    try:
        import boto3  # noqa: F401
        from moto.server import ThreadedMotoServer  # noqa: F401
    except ImportError:
        return False
    return True


class MotoServer:
    """moto's S3 on 127.0.0.1:<ephemeral>, with a boto3 client for setting up buckets."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        self.host, self.port = self._server.get_host_and_port()
        self.endpoint = f"{self.host}:{self.port}"
        import boto3

        self.client = boto3.client(
            "s3", endpoint_url=f"http://{self.endpoint}", region_name=REGION,
            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)

    def create_bucket(self, bucket: str) -> None:
        self.client.create_bucket(Bucket=bucket)

    def upload_dir(self, local_dir: str, bucket: str, prefix: str) -> List[str]:
        """Uploads every file below local_dir to s3://bucket/prefix/<relative path>."""
        keys = []
        for root, _, files in sorted(os.walk(local_dir)):
            for name in sorted(files):
                path = os.path.join(root, name)
                key = prefix.rstrip("/") + "/" + os.path.relpath(path, local_dir)
                self.client.upload_file(path, bucket, key)
                keys.append(key)
        return keys

    def stop(self) -> None:
        self._server.stop()


@contextlib.contextmanager
def serving_dir(local_dir: str, bucket: str, prefix: str) -> Iterator[MotoServer]:
    """A MotoServer holding every file below local_dir at s3://bucket/prefix/ (``server.keys``,
    ``server.local_dir``), with EC2 metadata lookups off while it runs (never probe a metadata
    address); for module-scoped fixtures."""
    saved = os.environ.get("AWS_EC2_METADATA_DISABLED")
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    server = MotoServer()
    try:
        server.create_bucket(bucket)
        server.keys = server.upload_dir(local_dir, bucket, prefix)
        server.local_dir = local_dir
        yield server
    finally:
        server.stop()
        if saved is None:
            os.environ.pop("AWS_EC2_METADATA_DISABLED", None)
        else:
            os.environ["AWS_EC2_METADATA_DISABLED"] = saved


@dataclass
class Fault:
    kind: str  # "503", "500", "403", "404", "drop", "drop_body", "delay", "freeze"
    remaining: int  # requests still to affect; < 0: every matching request
    match: Callable[[str, str, str], bool]
    delay_s: float = 0.0
    after: int = 0  # matching requests still to let through untouched first


@dataclass
class Request:
    method: str
    path: str  # without the query string
    query: str
    range: str
    status: int
    injected: str = ""
    access_key: str = ""  # the key id in the Authorization header ("" when unsigned)
    has_token: bool = False  # an X-Amz-Security-Token header was sent
    time: float = field(default_factory=time.monotonic)


_ERROR_BODIES = {
    503: ("Slow Down", "SlowDown", "Please reduce your request rate."),
    500: ("Internal Server Error", "InternalError", "We encountered an internal error."),
    403: ("Forbidden", "AccessDenied", "Access Denied"),
    404: ("Not Found", "NoSuchKey", "The specified key does not exist."),
}


def _error_response(status: int, method: str) -> bytes:
    reason, code, message = _ERROR_BODIES[status]
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{message}</Message><RequestId>stoker-proxy</RequestId></Error>").encode()
    if method == "HEAD":
        body = b""
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    return head + body


def _read_request(sock: socket.socket) -> Optional[Tuple[bytes, bytes]]:
    """Returns (header block, body) of one HTTP request, or None at EOF."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
        if len(data) > _MAX_HEADER_BYTES:
            raise ValueError("request header too large")
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return head, rest


class FaultProxy:
    """HTTP/1.1 proxy on loopback: one request per client connection, faults on demand."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._lock = threading.Lock()
        self._faults: List[Fault] = []
        self.requests: List[Request] = []
        self._in_flight = 0
        self.max_in_flight = 0  # most requests handled at once since the last clear()
        self._generation = 0  # clear() counts up: frozen requests see it and end
        # Every object's modification time, in listings and HEAD answers, is reported as one
        # fixed time: as real S3 (whole seconds) does for objects replaced within a second.
        self.freeze_times = False
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._handle(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.host, self.port = self._server.server_address[:2]
        self.endpoint = f"{self.host}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ control from tests

    def inject(self, kind: str, count: int = 1, path: str = "", method: str = "",
               delay_s: float = 0.0, after: int = 0) -> None:
        """Applies `kind` to the next `count` requests (count < 0: all) whose path contains
        `path` and whose method is `method` (empty: any), once `after` such requests have
        passed untouched. "delay" forwards after `delay_s` (an error kind answers after it);
        "freeze" reads the request and never answers (until the client hangs up, or clear())."""

        def match(m: str, p: str, _range: str) -> bool:
            return (not method or m == method) and path in p

        with self._lock:
            self._faults.append(Fault(kind, count, match, delay_s, after))

    def clear(self) -> None:
        """Removes every fault (frozen requests are let go), the log and the peak."""
        with self._lock:
            self._faults.clear()
            self.requests.clear()
            self.max_in_flight = 0
            self._generation += 1

    def in_flight(self) -> int:
        """Requests received and not answered yet (delayed and frozen ones included)."""
        with self._lock:
            return self._in_flight

    def log(self) -> List[Request]:
        with self._lock:
            return list(self.requests)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # ------------------------------------------------------------------------ the proxy

    def _take_fault(self, method: str, path: str, rng: str) -> Optional[Fault]:
        with self._lock:
            for fault in self._faults:
                if fault.remaining != 0 and fault.match(method, path, rng):
                    if fault.after > 0:
                        fault.after -= 1
                        continue
                    if fault.remaining > 0:
                        fault.remaining -= 1
                    return fault
        return None

    def _hold(self, client: socket.socket) -> None:
        """A frozen request: keeps the connection open, unanswered, until the client hangs up
        or clear() is called."""
        with self._lock:
            generation = self._generation
        while True:
            readable, _, _ = select.select([client], [], [], 0.2)
            if readable:
                try:
                    if not client.recv(1, socket.MSG_PEEK):
                        return  # the client gave up
                except OSError:
                    return
                time.sleep(0.2)  # bytes of a request we never read: keep polling slowly
            with self._lock:
                if self._generation != generation:
                    return

    def _record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def _handle(self, client: socket.socket) -> None:
        client.settimeout(_SOCKET_TIMEOUT_S)
        try:
            parsed = _read_request(client)
        except (OSError, ValueError):
            return
        if parsed is None:
            return
        # In flight from the complete request until just before the reply leaves, so a client
        # that sends its next request as soon as it has a reply is never counted twice.
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        done = [False]

        def finish() -> None:
            if not done[0]:
                done[0] = True
                with self._lock:
                    self._in_flight -= 1

        try:
            self._handle_one(client, parsed, finish)
        finally:
            finish()

    def _handle_one(self, client: socket.socket, parsed: Tuple[bytes, bytes],
                    finish: Callable[[], None]) -> None:
        head, body = parsed
        lines = head.split(b"\r\n")
        method, target, _ = lines[0].decode("latin-1").split(" ", 2)
        path, _, query = target.partition("?")
        headers = []
        rng = ""
        access_key = ""
        has_token = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            lname = name.strip().lower()
            if lname == b"range":
                rng = value.strip().decode("latin-1")
            elif lname == b"authorization":
                found = re.search(r"Credential=([^/,\s]+)/", value.decode("latin-1"))
                access_key = found.group(1) if found else "?"
            elif lname == b"x-amz-security-token":
                has_token = True
            if lname in (b"connection", b"keep-alive", b"proxy-connection"):
                continue
            headers.append(line)
        fault = self._take_fault(method, path, rng)
        record = Request(method, path, query, rng, 0, fault.kind if fault else "", access_key,
                         has_token)
        self._record(record)  # now, so a request the client gave up on is still counted
        if fault is not None and fault.kind in ("503", "500", "403", "404"):
            record.status = int(fault.kind)
            time.sleep(fault.delay_s)  # a slow error, like a loaded store's
            finish()
            try:
                client.sendall(_error_response(int(fault.kind), method))
            except OSError:
                pass
            return
        if fault is not None and fault.kind == "drop":
            finish()
            # RST instead of FIN so the client sees a reset connection.
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
            return
        if fault is not None and fault.kind == "freeze":
            self._hold(client)
            return
        if fault is not None and fault.kind == "delay":
            time.sleep(fault.delay_s)
        upstream_request = b"\r\n".join([lines[0]] + headers + [b"Connection: close", b"", b""])
        try:
            with socket.create_connection(self.upstream, timeout=_SOCKET_TIMEOUT_S) as up:
                up.sendall(upstream_request + body)
                response = b""
                while True:
                    chunk = up.recv(1 << 20)
                    if not chunk:
                        break
                    response += chunk
        except OSError:
            record.status = 502
            finish()
            return  # upstream gone: the client sees a closed connection
        if self.freeze_times:
            response = _freeze_times(response)
        status_line = response.split(b"\r\n", 1)[0].split(b" ")
        record.status = int(status_line[1]) if len(status_line) > 1 else 0
        finish()
        if fault is not None and fault.kind == "drop_body":
            # Headers and half of the body, then a reset.
            header_end = response.find(b"\r\n\r\n") + 4
            cut = header_end + max(0, (len(response) - header_end) // 2)
            try:
                client.sendall(response[:cut])
            except OSError:
                pass
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
            return
        try:
            client.sendall(response)
        except OSError:
            pass


def _freeze_times(response: bytes) -> bytes:
    """The same response with every Last-Modified time replaced by a fixed one of the same
    length (so Content-Length stays right)."""
    fixed = {24: b"2020-01-01T00:00:00.000Z", 20: b"2020-01-01T00:00:00Z"}

    def in_xml(match: "re.Match[bytes]") -> bytes:
        value = match.group(1)
        return b"<LastModified>" + fixed.get(len(value), value) + b"</LastModified>"

    head, sep, body = response.partition(b"\r\n\r\n")
    head = re.sub(rb"(?im)^(last-modified:\s*).*$",
                  lambda m: m.group(1) + b"Wed, 01 Jan 2020 00:00:00 GMT", head)
    body = re.sub(rb"<LastModified>([^<]*)</LastModified>", in_xml, body)
    return head + sep + body


def isolate_aws_env(monkeypatch, tmp_path) -> None:
    """No credentials, profile, region or config from the machine running the tests, and no
    instance-metadata probe: only what a test passes reaches the AWS SDK."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
                 "AWS_ENDPOINT_URL_S3", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config-none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials-none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def s3_options(server, **extra: Any) -> dict:
    """Loader ``storage_options`` for `server` (a MotoServer or a FaultProxy): plain HTTP, the
    test region and keys; `extra` adds or replaces keys."""
    options = dict(endpoint_override=server.endpoint, scheme="http", region=REGION,
                   access_key=ACCESS_KEY, secret_key=SECRET_KEY)
    options.update(extra)
    return options


def dataset_server(bucket: str, prefix: str, write: Callable[[str], Any]):
    """A module-scoped fixture (assign it to ``moto``): ``write(folder)`` writes a dataset into
    a fresh temporary folder, which a MotoServer serves at s3://bucket/prefix/ for the module's
    tests (see serving_dir). conftest.py's ``proxy`` fixture fronts it."""

    @pytest.fixture(scope="module")
    def moto(tmp_path_factory):
        local = str(tmp_path_factory.mktemp(bucket) / prefix)
        write(local)
        with serving_dir(local, bucket, prefix) as server:
            yield server

    return moto


# ------------------------------------------------------------------ S3 in its own process

_CONTROL_TIMEOUT_S = 10.0
_START_TIMEOUT_S = 90.0


class S3ServerProcess:
    """moto and a FaultProxy in a child process (this file run as a script), serving every file
    below `local_dir` at s3://bucket/prefix/. The loader talks to ``endpoint`` (the proxy); the
    test steers the proxy over an HTTP control endpoint: inject(), clear(), log(), in_flight().
    kill() ends the server with SIGKILL (connections reset, nothing answers after). The child
    also exits when the test process goes away (it watches its stdin)."""

    def __init__(self, local_dir: str, bucket: str, prefix: str,
                 log_path: Optional[str] = None) -> None:
        env = dict(os.environ, AWS_EC2_METADATA_DISABLED="true", PYTHONUNBUFFERED="1")
        self.log_path = log_path
        stderr = open(log_path, "w") if log_path else subprocess.DEVNULL
        try:
            self._proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "serve", local_dir, bucket, prefix],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env)
        finally:
            if log_path:
                stderr.close()
        self.pid = self._proc.pid
        ready, _, _ = select.select([self._proc.stdout], [], [], _START_TIMEOUT_S)
        line = self._proc.stdout.readline() if ready else b""
        if not line:
            self.kill()
            raise RuntimeError(f"the S3 server process did not start; see {log_path}")
        info = json.loads(line)
        self.host, self.port = "127.0.0.1", info["proxy_port"]
        self.endpoint = f"{self.host}:{self.port}"  # the proxy: what loaders use
        self.moto_endpoint = f"127.0.0.1:{info['moto_port']}"  # no faults
        self.keys: List[str] = info["keys"]
        self.local_dir = local_dir
        self._control = f"http://127.0.0.1:{info['control_port']}"

    def _call(self, path: str, body: Optional[dict] = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self._control + path, data=data,
                                         method="GET" if body is None else "POST")
        with urllib.request.urlopen(request, timeout=_CONTROL_TIMEOUT_S) as response:
            return json.loads(response.read() or b"null")

    def inject(self, kind: str, count: int = 1, path: str = "", method: str = "",
               delay_s: float = 0.0, after: int = 0) -> None:
        """See FaultProxy.inject."""
        self._call("/inject", dict(kind=kind, count=count, path=path, method=method,
                                   delay_s=delay_s, after=after))

    def clear(self) -> None:
        self._call("/clear", {})

    def log(self) -> List[Request]:
        return [Request(**entry) for entry in self._call("/log")]

    def in_flight(self) -> int:
        return self._call("/state")["in_flight"]

    def wait_in_flight(self, at_least: int = 1, timeout: float = 30.0) -> bool:
        """Whether `at_least` requests were in flight at once within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.in_flight() >= at_least:
                return True
            time.sleep(0.05)
        return False

    def alive(self) -> bool:
        return self._proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: the server dies at once, with its open connections."""
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
        self._proc.wait(timeout=30)

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()  # the child exits at EOF
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        self._proc.stdout.close()


@dataclass
class DatasetFolder:
    local_dir: str
    bucket: str
    prefix: str

    def source(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def dataset_folder(bucket: str, prefix: str, write: Callable[[str], Any]):
    """A module-scoped fixture (assign it to ``s3_data``): ``write(folder)`` writes a dataset into
    a fresh temporary folder, to be served at s3://bucket/prefix/ by conftest.py's
    ``s3_process`` fixture (a server in its own process, one per test)."""

    @pytest.fixture(scope="module")
    def s3_data(tmp_path_factory):
        local = str(tmp_path_factory.mktemp(bucket) / prefix)
        write(local)
        return DatasetFolder(local, bucket, prefix)

    return s3_data


def _serve(local_dir: str, bucket: str, prefix: str) -> None:
    """The child of S3ServerProcess: moto + proxy + control endpoint, until stdin closes."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    logging.basicConfig(level=logging.ERROR)
    moto = MotoServer()
    moto.create_bucket(bucket)
    keys = moto.upload_dir(local_dir, bucket, prefix)
    fault_proxy = FaultProxy(moto.host, moto.port)

    class Control(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _reply(self, value: Any) -> None:
            body = json.dumps(value).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/log":
                self._reply([asdict(r) for r in fault_proxy.log()])
            elif self.path == "/state":
                self._reply(dict(in_flight=fault_proxy.in_flight(),
                                 max_in_flight=fault_proxy.max_in_flight))
            else:
                self.send_error(404)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body: Dict[str, Any] = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/inject":
                fault_proxy.inject(**body)
            elif self.path == "/clear":
                fault_proxy.clear()
            else:
                self.send_error(404)
                return
            self._reply(None)

    control = ThreadingHTTPServer(("127.0.0.1", 0), Control)
    control.daemon_threads = True
    threading.Thread(target=control.serve_forever, daemon=True).start()
    print(json.dumps(dict(proxy_port=fault_proxy.port, moto_port=moto.port,
                          control_port=control.server_address[1], keys=keys)), flush=True)
    sys.stdin.buffer.read()  # returns when the test process closes the pipe or dies
    os._exit(0)  # no teardown: handler threads may be frozen or sleeping


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "serve":
        _serve(*sys.argv[2:])
    else:
        sys.exit("usage: s3_fixtures.py serve LOCAL_DIR BUCKET PREFIX")
