"""A delaying (and optionally rate-limiting) TCP proxy for the remote benchmark (bench/remote.py).

    python -m bench.remote_proxy --upstream HOST:PORT --delay-ms 10 [--rate-mbit 200] \
        --port-file F --stats-file S

Listens on 127.0.0.1:<ephemeral> (written to --port-file), forwards every connection to the
upstream. Each chunk read in either direction is held for --delay-ms before it is written on, in
a pipeline (the delay adds latency per direction, it does not cap throughput). With --rate-mbit
(the fallback when network namespaces or tc are not permitted) the upstream->client direction of
all connections together is limited by one token bucket (burst 256 KiB). Bytes forwarded
upstream->client are written to --stats-file every 100 ms. asyncio, one process, bounded queues.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

CHUNK = 64 << 10
BURST = 256 << 10


class Bucket:
    def __init__(self, rate_bytes_s: float) -> None:
        self.rate = rate_bytes_s
        self.tokens = float(BURST)
        self.stamp = time.monotonic()

    async def take(self, n: int) -> None:
        while True:
            now = time.monotonic()
            self.tokens = min(float(BURST), self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            if self.tokens >= n:
                self.tokens -= n
                return
            await asyncio.sleep(max(0.001, (n - self.tokens) / self.rate))


class Proxy:
    def __init__(self, upstream: str, delay_s: float, rate_mbit: float) -> None:
        host, port = upstream.rsplit(":", 1)
        self.up_host, self.up_port = host, int(port)
        self.delay_s = delay_s
        self.bucket = Bucket(rate_mbit * 1e6 / 8) if rate_mbit > 0 else None
        self.down_bytes = 0
        self.up_bytes = 0
        self.connections = 0

    async def _pump(self, reader, writer, downstream: bool) -> None:
        queue: asyncio.Queue = asyncio.Queue(maxsize=64)

        async def read_side() -> None:
            try:
                while True:
                    data = await reader.read(CHUNK)
                    if downstream and self.bucket is not None and data:
                        await self.bucket.take(len(data))
                    await queue.put((time.monotonic() + self.delay_s, data))
                    if not data:
                        return
            except (ConnectionError, OSError):
                await queue.put((0.0, b""))

        async def write_side() -> None:
            try:
                while True:
                    due, data = await queue.get()
                    wait = due - time.monotonic()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    if not data:
                        if writer.can_write_eof():
                            writer.write_eof()
                        return
                    writer.write(data)
                    if downstream:
                        self.down_bytes += len(data)
                    else:
                        self.up_bytes += len(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                return

        await asyncio.gather(read_side(), write_side())

    async def handle(self, c_reader, c_writer) -> None:
        self.connections += 1
        try:
            u_reader, u_writer = await asyncio.wait_for(
                asyncio.open_connection(self.up_host, self.up_port), 10)
        except (OSError, asyncio.TimeoutError):
            c_writer.close()
            return
        try:
            await asyncio.gather(self._pump(c_reader, u_writer, False),
                                 self._pump(u_reader, c_writer, True))
        finally:
            for w in (u_writer, c_writer):
                try:
                    w.close()
                except Exception:  # noqa: BLE001
                    pass


async def _main(args) -> None:
    proxy = Proxy(args.upstream, args.delay_ms / 1000.0, args.rate_mbit)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0, limit=CHUNK)
    port = server.sockets[0].getsockname()[1]
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(port))
    os.replace(tmp, args.port_file)
    deadline = time.monotonic() + args.max_seconds
    async with server:
        while time.monotonic() < deadline and os.getppid() == args.parent:
            if args.stats_file:
                tmp = args.stats_file + ".tmp"
                with open(tmp, "w") as f:
                    f.write(f"{proxy.down_bytes} {proxy.up_bytes} {proxy.connections}")
                os.replace(tmp, args.stats_file)
            await asyncio.sleep(0.1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--upstream", required=True)
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--rate-mbit", type=float, default=0.0)
    p.add_argument("--port-file", required=True)
    p.add_argument("--stats-file", default="")
    p.add_argument("--max-seconds", type=float, default=3600.0)  # bounded even if orphaned
    p.add_argument("--parent", type=int, default=os.getppid())
    args = p.parse_args()
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
