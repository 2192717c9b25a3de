"""The `stoker` command line (also `python -m stoker`).

  stoker inspect URI     files, rows, row groups, column types/encodings/compression, what stoker
                         will produce per column, and warnings with advice
  stoker bench URI ...   stream the dataset with stoker, print rows/s, MB/s, the per-stage
                         breakdown and the bottleneck
  stoker demo            write a synthetic dataset and stream it
  stoker cache stats DIR entries and bytes of a node-local cache folder
  stoker cache clear DIR empty it (safe while loaders use it)
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import List, Optional

__all__ = ["main"]


def _json_object(text: str) -> dict:
    import json

    try:
        value = json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not JSON: {error}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object {column: [op, ...]}")
    return value


def _names(text: str) -> List[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated column names, got {text!r}")
    return names


# Engine values (the Loader's) that the flags below accept.
TIME_UNITS = ("D", "h", "m", "s", "ms", "us", "ns")
DECIMAL_MODES = ("float64", "float32", "scaled_int64")


def _per_column_choice(flag: str, choices: tuple):
    """A flag taking one choice for every column (``padded``) or ``col=choice`` pairs, comma
    separated (``hist=padded,tags=ragged``): a str or a {column: choice} dict for the Loader."""

    def parse(text: str):
        text = text.strip()
        if "=" not in text:
            if text not in choices:
                raise argparse.ArgumentTypeError(
                    f"expected one of {', '.join(choices)} or COLUMN=VALUE pairs, got {text!r}")
            return text
        out = {}
        for pair in text.split(","):
            name, _, value = pair.partition("=")
            name, value = name.strip(), value.strip()
            if not name or value not in choices:
                raise argparse.ArgumentTypeError(
                    f"{flag} {pair!r}: expected COLUMN=VALUE with VALUE one of "
                    f"{', '.join(choices)}")
            out[name] = value
        return out

    return parse


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    value = _non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected a positive number, got 0")
    return value


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stoker", description=__doc__,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="write a synthetic dataset and stream it")
    demo.add_argument("--path", default="demo_data", help="dataset folder (default: demo_data)")
    demo.add_argument("--batch-size", type=_positive_int, default=4096)

    inspect = sub.add_parser("inspect", help="describe a Parquet dataset and what stoker makes of it")
    inspect.add_argument("uri", help="a Parquet file, folder, glob or URI (s3://...)")
    inspect.add_argument("--columns", type=_names, help="only these columns (comma-separated)")
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    inspect.add_argument("--time-unit", type=_per_column_choice("--time-unit", TIME_UNITS),
                         metavar="UNIT|COL=UNIT,...",
                         help="report timestamps and dates as float64 counts of this unit")
    inspect.add_argument("--decimals", type=_per_column_choice("--decimals", DECIMAL_MODES),
                         metavar="MODE|COL=MODE,...",
                         help="report decimal columns as float64, float32 or scaled_int64")
    inspect.add_argument("--transforms", type=_json_object, metavar="JSON",
                         help='transform chains, e.g. \'{"image": [{"op": "decode_image"}, '
                              '{"op": "resize", "size": [224, 224]}]}\': shows what each '
                              "chain produces")

    bench = sub.add_parser("bench", help="measure stoker on a dataset and name the bottleneck")
    bench.add_argument("uri", help="a Parquet file, folder, glob or URI (s3://...)")
    stop = bench.add_mutually_exclusive_group()
    stop.add_argument("--batches", type=_positive_int, help="stop after this many batches")
    stop.add_argument("--seconds", type=_positive_float,
                      help="stop after this many seconds (default: 10 when --batches is not given)")
    bench.add_argument("--columns", type=_names, help="columns delivered one array each")
    bench.add_argument("--features", type=_names, help="columns stacked into one [B, F] array")
    bench.add_argument("--batch-size", type=_positive_int, default=1024)
    bench.add_argument("--no-shuffle", dest="shuffle", action="store_false")
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--shuffle-window", help="rows (an integer) or a size such as 256MiB")
    bench.add_argument("--keep-last", dest="drop_last", action="store_false",
                       help="keep the short last batch (drop_last=False)")
    bench.add_argument("--num-threads", type=_positive_int)
    bench.add_argument("--prefetch-bytes", help="e.g. 512MiB")
    bench.add_argument("--output", choices=["numpy", "torch"], default="numpy")
    bench.add_argument("--lists", type=_per_column_choice("--lists", ("padded", "ragged")),
                       metavar="MODE|COL=MODE,...",
                       help="how variable-length list columns arrive: padded or ragged, for all "
                            "list columns or per column (hist=padded,tags=ragged)")
    bench.add_argument("--time-unit", type=_per_column_choice("--time-unit", TIME_UNITS),
                       metavar="UNIT|COL=UNIT,...",
                       help="timestamps and dates as float64 counts of D, h, m, s, ms, us or ns "
                            "since the epoch (for all, or per column: ts=s)")
    bench.add_argument("--decimals", type=_per_column_choice("--decimals", DECIMAL_MODES),
                       metavar="MODE|COL=MODE,...",
                       help="decimal columns as float64, float32 or scaled_int64 (for all, or "
                            "per column: price=float64)")
    bench.add_argument("--fill-null", type=float, help="value that replaces nulls")
    bench.add_argument("--null-mask", action="store_true", help="add <name>_mask arrays")
    bench.add_argument("--features-dtype", default="float32")
    bench.add_argument("--allow-lossy-cast", action="store_true")
    bench.add_argument("--step-ms", type=_non_negative_float, default=0.0,
                       help="busy-wait this long per batch, standing in for the training step")
    bench.add_argument("--no-progress", dest="progress", action="store_false")
    bench.add_argument("--cache-dir", help="node-local cache folder (ready tensors, remote blocks)")

    cache = sub.add_parser("cache", help="inspect or clear a node-local cache folder")
    cache_sub = cache.add_subparsers(dest="cache_command", required=True)
    for name, text in (("stats", "entries and bytes per kind"), ("clear", "remove every entry")):
        action = cache_sub.add_parser(name, help=text)
        action.add_argument("cache_dir", help="the cache_dir given to stoker.Loader")
        if name == "stats":
            action.add_argument("--json", action="store_true", help="print the numbers as JSON")
    return parser


def _loader_kwargs(args: argparse.Namespace) -> dict:
    kwargs = {"columns": args.columns, "features": args.features, "batch_size": args.batch_size,
              "shuffle": args.shuffle, "seed": args.seed, "drop_last": args.drop_last,
              "num_threads": args.num_threads, "output": args.output, "lists": args.lists,
              "fill_null": args.fill_null, "null_mask": args.null_mask,
              "features_dtype": args.features_dtype, "allow_lossy_cast": args.allow_lossy_cast,
              "cache_dir": args.cache_dir, "time_unit": args.time_unit,
              "decimals": args.decimals}
    if args.shuffle_window is not None:
        window = args.shuffle_window.strip()
        kwargs["shuffle_window"] = int(window) if window.isdigit() else window
    if args.prefetch_bytes is not None:
        text = args.prefetch_bytes.strip()
        kwargs["prefetch_bytes"] = int(text) if text.isdigit() else text
    return kwargs


_NAME = r"'([^']+)'"
# The engine's advice names Loader arguments; on the command line the same choices are flags.
_ADVICE = [
    (re.compile(r"lists=\{" + _NAME + r": '(padded|ragged)'\}"), r"--lists \1=\2"),
    (re.compile(r"time_unit=\{" + _NAME + r": '(\w+)'\}"), r"--time-unit \1=\2"),
    (re.compile(r"decimals=\{" + _NAME + r": '(\w+)'\}"), r"--decimals \1=\2"),
    (re.compile(r"lists='(padded|ragged)'"), r"--lists \1"),
    (re.compile(r"fill_null=\{" + _NAME + r": value\}"), r"--fill-null VALUE"),
    (re.compile(r"null_mask=\[" + _NAME + r"\]"), r"--null-mask"),
    (re.compile(r"allow_lossy_cast=True"), r"--allow-lossy-cast"),
    (re.compile(r"\bfeatures_dtype\b"), r"--features-dtype"),
]


def cli_advice(message: str) -> str:
    """An engine error's advice in the command line's flag syntax (``lists={'hist': 'padded'}``
    becomes ``--lists hist=padded``)."""
    for pattern, flag in _ADVICE:
        message = pattern.sub(flag, message)
    return message


def main(argv: Optional[List[str]] = None) -> int:
    args = _build_parser().parse_args(argv)

    from ._cli_inspect import CliError
    from .errors import StokerError

    try:
        if args.command == "demo":
            from ._demo import run_demo

            run_demo(args.path, args.batch_size)
        elif args.command == "inspect":
            from ._cli_inspect import run_inspect

            return run_inspect(args.uri, args.columns, args.json, args.transforms,
                               time_unit=args.time_unit, decimals=args.decimals)
        elif args.command == "bench":
            from ._cli_bench import run_bench

            run_bench(args.uri, _loader_kwargs(args), args.batches, args.seconds,
                      step_ms=args.step_ms, progress=args.progress)
        elif args.command == "cache":
            from ._cli_cache import run_cache

            return run_cache(args.cache_command, args.cache_dir, getattr(args, "json", False))
    except (StokerError, CliError) as error:
        text = str(error)
        if args.command == "bench":
            text = cli_advice(text)
        print(f"stoker: error: {text}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("stoker: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
