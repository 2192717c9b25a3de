"""`stoker inspect URI`: what a Parquet dataset holds and what stoker will make of it.

Formats ``stoker.describe`` (the engine's ``Describe``: the Loader's own listing, footers read
once, every column resolved on its own); reads no data pages and lists nothing itself.
"""

from __future__ import annotations

import json
import os
import statistics
from typing import Any, Dict, List, Optional

__all__ = ["CliError", "inspect_dataset", "format_report", "run_inspect"]

MiB = 2**20
# Row groups outside this range (uncompressed) train badly: see the warnings below.
SMALL_ROW_GROUP = 8 * MiB
LARGE_ROW_GROUP = 1024 * MiB
SLOW_CODECS = {"GZIP", "BROTLI", "LZO"}
# Below this many uncompressed bytes a dataset is small: its row-group layout does not matter
# (it fits in memory, a rewrite gains nothing), so no row-group advice is given.
SMALL_DATASET = 64 * MiB
TARGET_ROW_GROUP = 128 * MiB


def _dataset_bytes(r: Dict[str, Any]) -> float:
    """Uncompressed bytes of the whole dataset (every row group, every column)."""
    return r.get("dataset_bytes", r["uncompressed_bytes"])


class CliError(Exception):
    """A problem with the command's arguments, reported with exit code 2."""


def _summary(values: List[float]) -> Dict[str, float]:
    if not values:
        return {"min": 0, "median": 0, "max": 0}
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def _produced(column) -> Dict[str, Any]:
    """What stoker makes of one described column, or why it cannot."""
    from .errors import error_class

    if not (column.ok or column.needs_list_mode):
        return {"produces": None, "error": column.error,
                "error_type": error_class(column.error_kind).__name__}
    kind, dtype = column.kind.name, column.dtype
    shape = ["B"] + [int(d) for d in column.inner_shape]
    text = f"{kind} {dtype} [{', '.join(map(str, shape))}]"
    if kind == "padded":
        from . import _stoker

        text += f" + {_stoker.lengths_key(column.name)}"
    if column.annotation:
        text += f" ({column.annotation})"
    out = {"produces": text, "kind": kind, "dtype": dtype, "shape": shape[1:]}
    if column.needs_list_mode:
        out["produces"] += "; needs lists='ragged' or 'padded'"
        out["needs_lists"] = True
    return out


def inspect_dataset(uri: str, columns: Optional[List[str]] = None,
                    storage_options: Optional[Dict[str, Any]] = None,
                    transforms: Optional[Dict[str, Any]] = None,
                    **loader_options: Any) -> Dict[str, Any]:
    """The report of `stoker inspect` (a dict, also printed by ``--json``). ``loader_options``
    (``time_unit``, ``decimals``, ...) change what each column is reported to produce."""
    from ._describe import describe, redact_uri
    from .errors import error_class

    if not uri:
        raise CliError("no dataset given: pass a Parquet file, folder, glob or URI")
    desc = describe(uri, columns=columns, storage_options=storage_options, transforms=transforms,
                    **{k: v for k, v in loader_options.items() if v is not None})
    for column in desc.columns:
        if column.error_kind == "column_not_found":
            raise error_class(column.error_kind)(column.error)
    cols = []
    for column in desc.columns:
        entry = {"name": column.name, "arrow_type": column.arrow_type,
                 "physical_type": list(column.physical_types),
                 "encodings": list(column.encodings), "compression": list(column.compression),
                 "nulls": column.null_count, "nulls_known": column.null_count_known,
                 "compressed_bytes": column.compressed_bytes,
                 "uncompressed_bytes": column.uncompressed_bytes}
        if column.partition:
            entry["partition"] = True
        entry.update(_produced(column))
        cols.append(entry)
    rg_rows = [rg.rows for rg in desc.row_groups]
    rg_bytes = [rg.bytes for rg in desc.row_groups]
    report = {
        "uri": redact_uri(uri), "files": [f.path for f in desc.files],
        "num_files": len(desc.files), "rows": desc.rows,
        "row_groups": len(rg_rows), "rows_per_row_group": _summary(rg_rows),
        "bytes_per_row_group": _summary(rg_bytes),
        "dataset_bytes": sum(rg_bytes),
        "compressed_bytes": sum(c["compressed_bytes"] for c in cols),
        "uncompressed_bytes": sum(c["uncompressed_bytes"] for c in cols),
        "columns": cols,
    }
    report["warnings"] = _warnings(report)
    return report


def _warnings(r: Dict[str, Any]) -> List[str]:
    out = []
    size = r["bytes_per_row_group"]["median"]
    # Row-group size advice only where a rewrite can follow it: a dataset smaller than one
    # good row group is told nothing about its row groups.
    total = _dataset_bytes(r)
    big_enough = total >= SMALL_DATASET
    if r["rows"] == 0:
        out.append("the dataset has no rows")
    elif size < SMALL_ROW_GROUP and big_enough and r["row_groups"] > 1:
        rows = r["rows"] * TARGET_ROW_GROUP / max(total, 1)
        out.append(f"row groups are small (median {size / MiB:.1f} MiB uncompressed, "
                   f"{r['rows_per_row_group']['median']:,.0f} rows) for a dataset of "
                   f"{total / MiB:,.0f} MiB: per-row-group overhead dominates and shuffling is "
                   "coarse-grained on few rows. Rewrite with row groups of 64-256 MiB (pyarrow: "
                   f"write_table(..., row_group_size={max(int(rows), 1)}) for about "
                   f"{TARGET_ROW_GROUP // MiB} MiB).")
    elif size > LARGE_ROW_GROUP:
        out.append(f"row groups are large (median {size / MiB:.0f} MiB uncompressed): each one "
                   "is a unit of memory and of shuffling; keep prefetch_bytes above "
                   f"{size / MiB:.0f} MiB or rewrite with 64-256 MiB row groups.")
    if 0 < r["row_groups"] < (os.cpu_count() or 1) and big_enough:
        out.append(f"only {r['row_groups']} row group(s) for {os.cpu_count()} cores: "
                   "stoker splits row groups by column (task_bytes), but more row groups "
                   "give more parallelism and better shuffling.")
    for c in r["columns"]:
        name = c["name"]
        if c.get("error") and "pass decimals=" in c["error"]:
            out.append(f"column {name!r} ({c['arrow_type']}) is a decimal: pass decimals= "
                       "('float64', 'float32' or 'scaled_int64'; --decimals for stoker bench).")
        elif c.get("error"):
            out.append(f"column {name!r} ({c['arrow_type']}): stoker cannot read it: "
                       f"{c['error']}. Leave it out of columns=.")
        if c.get("needs_lists"):
            out.append(f"column {name!r} is a variable-length list: pass lists='padded' (dense "
                       f"[B, L] + {name}_lengths) or lists='ragged' (values + offsets).")
        if c["nulls"] and c["nulls_known"] and (c.get("needs_lists") or
                                                c.get("kind") in ("strings", "padded", "ragged")):
            # fill_null does not apply to strings and lists.
            out.append(f"column {name!r} has {c['nulls']:,} null(s): pass null_mask=[{name!r}], "
                       "otherwise reading it fails.")
        elif c["nulls"] and c["nulls_known"]:
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
        physical = "partition" if c.get("partition") else ",".join(c["physical_type"])
        rows.append((c["name"], c["arrow_type"], physical,
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


def run_inspect(uri: str, columns: Optional[List[str]] = None, as_json: bool = False,
                transforms: Optional[Dict[str, Any]] = None, progress: bool = False,
                **loader_options: Any) -> int:
    from ._cli_progress import Progress

    # The footers are read by one engine call that reports no counts: the line shows the time.
    with Progress("stoker inspect: reading footers", enabled=progress, tick=True):
        report = inspect_dataset(uri, columns, transforms=transforms, **loader_options)
    if as_json:
        print(json.dumps(report, indent=1, default=str))
    else:
        print(format_report(report))
    return 0
