"""`stoker inspect URI`: what a Parquet dataset holds and what stoker will make of it.

Reads only footers (pyarrow.parquet metadata) plus ``stoker.Loader(...).columns``; no data pages.
"""

from __future__ import annotations

import fnmatch
import json
import os
import statistics
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["CliError", "list_parquet_files", "inspect_dataset", "format_report", "run_inspect"]

MiB = 2**20
# Row groups outside this range (uncompressed) train badly: see the warnings below.
SMALL_ROW_GROUP = 8 * MiB
LARGE_ROW_GROUP = 1024 * MiB
SLOW_CODECS = {"GZIP", "BROTLI", "LZO"}


class CliError(Exception):
    """A problem with the command's arguments or the dataset, reported with exit code 2."""


def list_parquet_files(uri: str) -> Tuple[Any, List[str]]:
    """(pyarrow filesystem, sorted Parquet file paths) for a file, folder, glob or URI."""
    import pyarrow.fs as pafs

    if not uri:
        raise CliError("no dataset given: pass a Parquet file, folder, glob or URI")
    if "://" in uri:
        try:
            fs, path = pafs.FileSystem.from_uri(uri)
        except Exception as error:  # noqa: BLE001 - pyarrow raises several types
            raise CliError(f"cannot open {uri!r}: {error}") from None
    else:
        fs, path = pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(uri))
    pattern = None
    if any(ch in path for ch in "*?["):
        base = path
        while any(ch in os.path.basename(base) for ch in "*?[") or any(ch in base for ch in "*?["):
            base = os.path.dirname(base)
        pattern, path = path, base
    try:
        info = fs.get_file_info(path)
    except Exception as error:  # noqa: BLE001
        raise CliError(f"cannot read {uri!r}: {error}") from None
    if info.type == pafs.FileType.NotFound:
        raise CliError(f"no such file or folder: {uri}")
    if info.type == pafs.FileType.File:
        return fs, [path]
    selector = pafs.FileSelector(path, recursive=True)
    files = []
    for entry in fs.get_file_info(selector):
        if entry.type != pafs.FileType.File:
            continue
        rel = os.path.relpath(entry.path, path)
        if any(part.startswith((".", "_")) for part in rel.split(os.sep)):
            continue  # hidden files, _SUCCESS, _common_metadata
        if pattern is not None and not fnmatch.fnmatch(entry.path, pattern):
            continue
        if pattern is None and not entry.path.endswith((".parquet", ".parq", ".pq")):
            continue
        files.append(entry.path)
    if not files:
        raise CliError(f"no Parquet files in {uri}")
    return fs, sorted(files)


def _read_metadata(fs, path: str):
    import pyarrow.parquet as pq

    try:
        with fs.open_input_file(path) as f:
            return pq.ParquetFile(f).metadata
    except Exception as error:  # noqa: BLE001
        raise CliError(f"{path} is not a readable Parquet file: {error}") from None


def _summary(values: List[float]) -> Dict[str, float]:
    if not values:
        return {"min": 0, "median": 0, "max": 0}
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def _stoker_columns(uri: str, names: List[str]) -> Dict[str, Dict[str, Any]]:
    """What stoker produces per column, or why it cannot. One Loader for all columns when that
    works, else one per column so a single unsupported column does not hide the others."""
    from .errors import StokerError
    from .loader import Loader

    def describe(info) -> Dict[str, Any]:
        kind = str(info.kind).rsplit(".", 1)[-1]
        dtype = str(info.dtype).rsplit(".", 1)[-1]
        shape = ["B"] + [int(d) for d in info.inner_shape]
        text = f"{kind} {dtype} [{', '.join(map(str, shape))}]"
        if kind == "padded":
            text += f" + {info.name}_lengths"
        if info.annotation:
            text += f" ({info.annotation})"
        return {"produces": text, "kind": kind, "dtype": dtype}

    def open_loader(columns, **kw):
        return Loader(uri, columns=columns, shuffle=False, num_threads=1, batch_size=1, **kw)

    out: Dict[str, Dict[str, Any]] = {}
    try:
        loader = open_loader(names, lists="ragged")
        for name, info in loader.columns.items():
            out[name] = describe(info)
        loader.close()
        needs_lists = set()
        try:
            open_loader(names).close()
        except StokerError:
            needs_lists = {n for n, d in out.items() if d["kind"] == "ragged" and
                           not d.get("produces", "").endswith(("(utf8)", "(binary)"))}
        for name in needs_lists:
            out[name]["produces"] += "; needs lists='ragged' or 'padded'"
            out[name]["needs_lists"] = True
        return out
    except StokerError:
        pass
    for name in names:
        try:
            loader = open_loader([name], lists="ragged")
            out[name] = describe(loader.columns[name])
            loader.close()
        except StokerError as error:
            out[name] = {"produces": None, "error": str(error), "error_type": type(error).__name__}
    return out


def inspect_dataset(uri: str, columns: Optional[List[str]] = None) -> Dict[str, Any]:
    fs, files = list_parquet_files(uri)
    metas = [(path, _read_metadata(fs, path)) for path in files]
    schema = metas[0][1].schema.to_arrow_schema()
    names = columns or list(schema.names)
    missing = [n for n in names if n not in schema.names]
    if missing:
        have = list(schema.names)
        shown = ", ".join(have[:20]) + (f", ... ({len(have)} in all)" if len(have) > 20 else "")
        raise CliError(f"column(s) {', '.join(missing)} not in {uri}; it has {shown}")
    per_col: Dict[str, Dict[str, Any]] = {
        n: {"name": n, "arrow_type": str(schema.field(n).type), "physical_type": set(),
            "encodings": set(), "compression": set(), "nulls": 0, "nulls_known": True,
            "compressed_bytes": 0, "uncompressed_bytes": 0} for n in names}
    rg_rows, rg_bytes, file_rows = [], [], []
    for path, meta in metas:
        file_rows.append(meta.num_rows)
        for g in range(meta.num_row_groups):
            rg = meta.row_group(g)
            rg_rows.append(rg.num_rows)
            rg_bytes.append(rg.total_byte_size)
            for c in range(rg.num_columns):
                col = rg.column(c)
                top = col.path_in_schema.split(".")[0]
                if top not in per_col:
                    continue
                entry = per_col[top]
                entry["physical_type"].add(col.physical_type)
                entry["encodings"].update(col.encodings)
                entry["compression"].add(col.compression)
                entry["compressed_bytes"] += col.total_compressed_size
                entry["uncompressed_bytes"] += col.total_uncompressed_size
                stats = col.statistics
                if "." in col.path_in_schema:
                    # Nested (list) leaves count empty lists as nulls: not the rows' nulls.
                    entry["nulls_known"] = False
                elif stats is not None and stats.has_null_count:
                    entry["nulls"] += stats.null_count
                else:
                    entry["nulls_known"] = False
    produced = _stoker_columns(uri, names)
    cols = []
    for n in names:
        entry = per_col[n]
        for key in ("physical_type", "encodings", "compression"):
            entry[key] = sorted(entry[key])
        entry.update(produced.get(n, {}))
        cols.append(entry)
    report = {
        "uri": uri, "files": files, "num_files": len(files), "rows": sum(file_rows),
        "row_groups": len(rg_rows), "rows_per_row_group": _summary(rg_rows),
        "bytes_per_row_group": _summary(rg_bytes),
        "compressed_bytes": sum(c["compressed_bytes"] for c in cols),
        "uncompressed_bytes": sum(c["uncompressed_bytes"] for c in cols),
        "columns": cols,
    }
    report["warnings"] = _warnings(report)
    return report


def _warnings(r: Dict[str, Any]) -> List[str]:
    out = []
    size = r["bytes_per_row_group"]["median"]
    if r["rows"] == 0:
        out.append("the dataset has no rows")
    elif size < SMALL_ROW_GROUP:
        out.append(f"row groups are small (median {size / MiB:.1f} MiB uncompressed, "
                   f"{r['rows_per_row_group']['median']:,.0f} rows): per-row-group overhead "
                   "dominates and shuffling is coarse-grained on few rows. Rewrite with row groups "
                   "of 64-256 MiB (pyarrow: write_table(..., row_group_size=ROWS)).")
    elif size > LARGE_ROW_GROUP:
        out.append(f"row groups are large (median {size / MiB:.0f} MiB uncompressed): each one "
                   "is a unit of memory and of shuffling; keep prefetch_bytes above "
                   f"{size / MiB:.0f} MiB or rewrite with 64-256 MiB row groups.")
    if 0 < r["row_groups"] < (os.cpu_count() or 1):
        out.append(f"only {r['row_groups']} row group(s) for {os.cpu_count()} cores: "
                   "stoker splits row groups by column (task_bytes), but more row groups "
                   "give more parallelism and better shuffling.")
    for c in r["columns"]:
        name = c["name"]
        if c.get("error"):
            out.append(f"column {name!r} ({c['arrow_type']}): stoker cannot read it: "
                       f"{c['error']}. Leave it out of columns=.")
        if c.get("needs_lists"):
            out.append(f"column {name!r} is a variable-length list: pass lists='padded' (dense "
                       f"[B, L] + {name}_lengths) or lists='ragged' (values + offsets).")
        if c["nulls"] and c["nulls_known"]:
            out.append(f"column {name!r} has {c['nulls']:,} null(s): pass fill_null={{{name!r}: 0}} "
                       f"or null_mask=[{name!r}], otherwise reading it fails.")
        slow = SLOW_CODECS & set(c["compression"])
        if slow:
            out.append(f"column {name!r} is compressed with {', '.join(sorted(slow))}, slow to "
                       "decompress: rewrite with zstd, snappy or lz4.")
    return out


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def format_report(r: Dict[str, Any], max_files: int = 10) -> str:
    lines = [f"dataset {r['uri']}",
             f"  files       {r['num_files']}"]
    for path in r["files"][:max_files]:
        lines.append(f"                {path}")
    if r["num_files"] > max_files:
        lines.append(f"                ... {r['num_files'] - max_files} more")
    rr, rb = r["rows_per_row_group"], r["bytes_per_row_group"]
    lines += [f"  rows        {r['rows']:,}",
              f"  row groups  {r['row_groups']:,}: rows min/median/max {rr['min']:,.0f} / "
              f"{rr['median']:,.0f} / {rr['max']:,.0f}; uncompressed {rb['min'] / MiB:,.1f} / "
              f"{rb['median'] / MiB:,.1f} / {rb['max'] / MiB:,.1f} MiB",
              f"  size        {_mb(r['compressed_bytes'])} on disk, "
              f"{_mb(r['uncompressed_bytes'])} uncompressed", "", "columns"]
    header = ("name", "arrow type", "physical", "encodings", "compression", "nulls", "size",
              "stoker produces")
    rows = []
    for c in r["columns"]:
        nulls = f"{c['nulls']:,}" if c["nulls_known"] else "?"
        produces = c.get("produces") or f"unsupported: {c.get('error_type', 'error')}"
        rows.append((c["name"], c["arrow_type"], ",".join(c["physical_type"]),
                     ",".join(c["encodings"]), ",".join(c["compression"]), nulls,
                     _mb(c["uncompressed_bytes"]), produces))
    widths = [min(max(len(str(x[i])) for x in rows + [header]), 40) for i in range(len(header))]
    for row in [header] + rows:
        cells = [str(v) if len(str(v)) <= widths[i] or i == len(row) - 1 else str(v)[: widths[i] - 1] + "~"
                 for i, v in enumerate(row)]
        lines.append("  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(cells)).rstrip())
    lines.append("")
    if r["warnings"]:
        lines.append("warnings")
        lines += [f"  - {w}" for w in r["warnings"]]
    else:
        lines.append("no warnings: row groups, types and nulls look fine for training")
    return "\n".join(lines)


def run_inspect(uri: str, columns: Optional[List[str]] = None, as_json: bool = False) -> int:
    report = inspect_dataset(uri, columns)
    if as_json:
        print(json.dumps(report, indent=1, default=str))
    else:
        print(format_report(report))
    return 0
