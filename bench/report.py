"""Writes a suite's results: ``<name>.json`` (everything), ``<name>.md`` (tables) and
``<name>.png`` (rows/s per system and workload)."""

from __future__ import annotations

import json
import math
import os
from typing import List

from .runners import LABELS, ORDER


def _fmt(value, spec: str = ",.0f", suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec) + suffix


def median_run(runs: List[dict]):
    """The complete run with the median rows/s that carries loader stats (None if none)."""
    ok = sorted((r for r in runs if r.get("status") == "ok" and r.get("loader_stats")
                 and r.get("wall_s")), key=lambda r: r["rows"] / r["wall_s"])
    return ok[(len(ok) - 1) // 2] if ok else None


def _load(values) -> str:
    return "/".join(f"{v:.1f}" for v in values) if values else "-"


def _stage_list(stages) -> list:
    """Stages as the engine reports them (a list); reports recorded before the list format held
    a dict keyed by name, with one thread assumed for stages other than decode."""
    if isinstance(stages, list):
        return stages
    return [dict(st, name=name, pool="workers" if name == "decode" else name,
                 wait_in_s=st.get("wait_input_s", 0), wait_out_s=st.get("wait_output_s", 0))
            for name, st in stages.items()]


def verdict(stats: dict, wall_s: float) -> str:
    """Which stage limits the loader, from loader.stats() (shared with `stoker bench`)."""
    from stoker._cli_bench import bottleneck

    return bottleneck(stats, wall_s)[0]


def markdown(report: dict) -> str:
    m = report["machine"]
    v = m["versions"]
    lines = [f"# stoker benchmark: {report['name']} ({report['profile']})", "",
             f"Run {report['started']}, {report.get('elapsed_s', 0):.0f} s in all. "
             "Medians of repeats (best of the repeats alongside: other work on the machine only "
             "ever slows a run down); rows/s counts from constructing the loader to its last "
             "batch (start-up included). Each measurement runs in a fresh process.", "",
             f"Machine: {m['cores']} cores, {m['cpu_model']}, "
             f"{m['memory_bytes'] / 2**30:.0f} GiB RAM, {m['platform']}; "
             f"load average (1/5/15 min) at start {_load(m.get('load_average_at_start'))}, at end "
             f"{_load(m.get('load_average_at_end'))} (the machine is shared: other work ran "
             "during the measurements, so compare ratios within this run, not across runs).", "",
             "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val) + ".", ""]
    git = m.get("git") or {}
    if git.get("commit"):
        lines += [f"stoker measured at commit {git['commit']}"
                  + (f" with {git['uncommitted_engine_files']} uncommitted file(s) under cpp/ and "
                     "python/ (an editable install runs the working tree)"
                     if git.get("uncommitted_engine_files") else "") + ".", ""]
    lines += ["## Summary", ""] + summary_lines(report) + [""]
    unavailable: List[str] = []
    for workload, w in report["workloads"].items():
        d = w["dataset"]
        lines += [f"## {workload}", "",
                  f"{d['rows']:,} rows in {d['num_files']} files, {d['row_groups']} row groups; "
                  f"{d['uncompressed_bytes'] / 1e6:,.0f} MB uncompressed, "
                  f"{d['compressed_bytes'] / 1e6:,.0f} MB on disk. Batch {w['batch_size']}. "
                  f"Stall meter step: {w['step_s'] * 1e3:.1f} ms per batch "
                  f"({report['settings']['step_factor']}x {w['step_basis']}'s time per batch).", "",
                  "| system | rows/s | best rows/s | MB/s | stoker is | stoker (shuffle=False) is | "
                  "fraction of limit | CPU s / M rows | peak RSS MB | first batch s | stall fraction |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        results = w["results"]
        for n in ORDER:
            if n not in results:
                continue
            r = results[n]
            if r.get("status") != "ok":
                unavailable.append(f"- {workload}, {LABELS[n]}: {r.get('status')}: {r.get('reason')}")
                lines.append(f"| {LABELS[n]} | {r.get('status')} | | | | | | | | | |")
                continue
            speed = "1.00x" if n == "stoker" else _fmt(r.get("stoker_speedup"), ".2f", "x")
            speed2 = ("1.00x" if n == "stoker_noshuffle" else
                      _fmt(r.get("stoker_noshuffle_speedup"), ".2f", "x"))
            lines.append(
                f"| {LABELS[n]} | {_fmt(r['rows_per_s'])} | {_fmt(r.get('best_rows_per_s'))} | "
                f"{_fmt(r['mb_per_s'], ',.1f')} | {speed} | "
                f"{speed2} | "
                f"{_fmt(r.get('fraction_of_limit'), '.2f')} | {_fmt(r['cpu_s_per_mrows'], ',.1f')} | "
                f"{_fmt(r['peak_rss_mb'], ',.0f')} | {_fmt(r['first_batch_s'], '.2f')} | "
                f"{_fmt(r.get('stall_fraction'), '.3f')} |")
        if workload == "images" and "stoker" not in results:
            lines += ["", "stoker's image runner arrives with the transform issue; this table shows "
                          "the image baselines and the decode limit only."]
        for n in ORDER:
            if results.get(n, {}).get("short_epochs"):
                unavailable.append(f"- {workload}, {LABELS[n]}: {len(results[n]['short_epochs'])} "
                                   f"measurement(s) ended the epoch early and were repeated: "
                                   + "; ".join(results[n]["short_epochs"]))
        for key in ("stoker", "stoker_noshuffle"):
            stoker = results.get(key, {})
            run = median_run(w.get("raw", {}).get(key, []))
            if stoker.get("status") != "ok" or run is None:
                continue
            s, wall = run["loader_stats"], run["wall_s"]
            stages = ", ".join(f"{st['name']} busy {st['busy_s']:.2f} s / wait-in "
                               f"{st.get('wait_in_s', st.get('wait_input_s', 0)):.2f} s / wait-out "
                               f"{st.get('wait_out_s', st.get('wait_output_s', 0)):.2f} s"
                               for st in _stage_list(s["stages"]))
            lines += ["", f"{LABELS[key]}, stages of the median run (seconds summed over each "
                          f"stage's threads): {stages}; the consumer waited "
                          f"{s['consumer_wait_s']:.2f} s of {wall:.2f} s. **Verdict: "
                          f"{verdict(dict(s, stages=_stage_list(s['stages'])), wall)}**."]
        lines.append("")
    if unavailable:
        lines += ["## Not measured, or measured with problems", ""] + unavailable + [""]
    lines += ["## How to read this", "",
              "- *stoker is*: stoker's rows/s divided by that row's; *fraction of limit*: the row's "
              "rows/s divided by the limit's. The limit reads each row group with "
              "`ParquetFile.read_row_group(g, columns, use_threads=True)` and converts each column "
              "to NumPy zero-copy, without stacking, padding or shuffling (per row group, not "
              "per file: whole-file tables cost a copy per column and fresh pages; see "
              "bench/README.md).",
              "- Only stoker (shuffle=True) shuffles rows; every peer and stoker (shuffle=False) "
              "deliver rows in row-group order (Petastorm, the DataLoader and Ray shuffle at most "
              "the row-group order).",
              "- The stall fraction is measured with a consumer that busy-waits the step time "
              "per batch, holding the GIL like a Python training step; it is the share of the "
              "time after the first batch spent waiting for the next one.",
              "- CPU s / M rows counts the measuring process and all its children (DataLoader "
              "workers, Ray's processes); peak RSS is summed over them.", ""]
    lines += ["## Configurations", ""]
    seen = set()
    for workload, w in report["workloads"].items():
        for n in ORDER:
            r = w["results"].get(n)
            if not r:
                continue
            key = (n, "images" if workload == "images" else "tabular")
            if key in seen:
                continue
            seen.add(key)
            conf = "; ".join(f"{k}={val}" for k, val in r.get("config", {}).items())
            lines.append(f"- **{LABELS[n]}** ({key[1]}): {conf}")
    lines.append("")
    return "\n".join(lines)


def summary_lines(report: dict) -> List[str]:
    out = []
    for workload, w in report["workloads"].items():
        results = w["results"]
        for key, field in (("stoker", "stoker_speedup"), ("stoker_noshuffle", "stoker_noshuffle_speedup")):
            stoker = results.get(key, {})
            if stoker.get("status") != "ok":
                continue
            ratios = ", ".join(f"{results[n][field]:.2f}x {LABELS[n]}" for n in ORDER
                               if n in results and n not in ("stoker", "stoker_noshuffle", "limit",
                                                             "stoker_fill", "stoker_warm",
                                                             "memory_limit")
                               and results[n].get(field))
            limit = stoker.get("fraction_of_limit")
            stall = stoker.get("stall_fraction")
            speedups = f" = {ratios}" if ratios else ""
            out.append(f"- **{workload}**, {LABELS[key]}: {stoker['rows_per_s']:,.0f} rows/s{speedups}; "
                       f"fraction of the limit {_fmt(limit, '.2f')}; stall fraction "
                       f"{_fmt(stall, '.3f')} at {w['step_s'] * 1e3:.1f} ms per batch.")
        fill, plain = results.get("stoker_fill", {}), results.get("stoker", {})
        if fill.get("status") == "ok" and plain.get("status") == "ok" and plain.get("rows_per_s"):
            out.append(f"- **{workload}**, filling cache: {fill['rows_per_s']:,.0f} rows/s = "
                       f"{fill['rows_per_s'] / plain['rows_per_s']:.2f} of stoker without a cache "
                       f"({plain['rows_per_s']:,.0f} rows/s; target >= 0.9).")
        warm, memory = results.get("stoker_warm", {}), results.get("memory_limit", {})
        if warm.get("status") == "ok" and memory.get("status") == "ok" and memory.get("rows_per_s"):
            out.append(f"- **{workload}**, warm cache: {warm['rows_per_s']:,.0f} rows/s = "
                       f"{warm['rows_per_s'] / memory['rows_per_s']:.2f} of the memory limit "
                       f"({memory['rows_per_s']:,.0f} rows/s; target >= 0.6).")
    return out


def chart(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(report["workloads"])
    fig, axes = plt.subplots(1, len(workloads), figsize=(5.2 * len(workloads), 4.2), squeeze=False)
    for ax, workload in zip(axes[0], workloads):
        results = report["workloads"][workload]["results"]
        names = [n for n in ORDER if n in results]
        values = [results[n].get("rows_per_s") or 0 if results[n].get("status") == "ok" else 0
                  for n in names]
        colours = ["#d9534f" if n.startswith("stoker") else "#777777" if n == "limit" else "#5b8fd9"
                   for n in names]
        bars = ax.barh([LABELS[n] for n in names], values, color=colours)
        for bar, n, value in zip(bars, names, values):
            text = f"{value:,.0f}" if value else results[n].get("status", "")
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, " " + text,
                    va="center", fontsize=7)
        ax.invert_yaxis()
        ax.set_title(workload, fontsize=10)
        ax.set_xlabel("rows/s (median)")
        ax.tick_params(axis="y", labelsize=8)
        ax.set_xlim(0, max(values + [1]) * 1.35)
        if max(values + [1]) >= 10_000:
            from matplotlib.ticker import FuncFormatter

            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1000:.0f}k"))
    fig.suptitle(f"stoker vs peers ({report['profile']}, {report['machine']['cores']} cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def repo_relative(value):
    """The report with paths inside the repository made relative to it (no machine paths)."""
    if isinstance(value, dict):
        return {k: repo_relative(v) for k, v in value.items()}
    if isinstance(value, list):
        return [repo_relative(v) for v in value]
    if isinstance(value, str):
        return value.replace(_REPO + os.sep, "")
    return value


def redacted(report: dict, secrets=()) -> dict:
    """The report with every URI shown as stoker shows it (no user info, no query string) and
    each of ``secrets`` replaced by ``***``: stoker's own redaction, ``stoker.redact_uri``."""
    from stoker._redact import redact_value

    return redact_value(report, secrets)


def write_report(report: dict, out_dir: str, name: str, text: str) -> str:
    """Writes ``<out_dir>/<name>.json`` (the report, paths inside the repository relative to it)
    and ``<out_dir>/<name>.md`` (``text``); returns ``<out_dir>/<name>``. Every bench module
    writes its results through this."""
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, name)
    with open(base + ".json", "w") as f:
        json.dump(repo_relative(report), f, indent=1, default=str)
    with open(base + ".md", "w") as f:
        f.write(text)
    return base


def write_all(report: dict, out_dir: str, name: str) -> List[str]:
    report = redacted(report)
    base = write_report(report, out_dir, name, markdown(report))
    written = [base + ".json", base + ".md"]
    try:
        chart(report, base + ".png")
        written.append(base + ".png")
    except ImportError as error:
        print(f"no chart: {error}")
    return written
