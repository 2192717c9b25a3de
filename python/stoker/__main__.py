"""The `stoker` command line (also `python -m stoker`).

  stoker inspect URI     files, rows, row groups, column types/encodings/compression, what stoker
                         will produce per column, and warnings with advice
  stoker bench URI ...   stream the dataset with stoker, print rows/s, MB/s, the per-stage
                         breakdown and the bottleneck
  stoker demo            write a synthetic dataset and stream it
  stoker cache stats DIR entries and bytes of a node-local cache folder
  stoker cache clear DIR empty it (safe while loaders use it)

inspect and bench take every stoker.Loader option: --option KEY=VALUE (repeatable; VALUE is JSON,
or a plain string) and --config FILE (.json or .toml, a mapping of options), besides the flags
for the common ones. Transform ops are written like stoker.ops calls:
  stoker bench images/ --batches 50 -o 'transforms={"image": ["decode_image()",
      "resize([64, 64])", "to_chw()"]}' --columns image,label
A progress line is drawn on stderr when it is a terminal (--quiet: none).
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import List, Optional

__all__ = ["main"]


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
    from ._cli_options import _positive_int, add_loader_arguments

    parser = argparse.ArgumentParser(prog="stoker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    # Every command: the progress line on stderr (drawn only when stderr is a terminal).
    quiet = argparse.ArgumentParser(add_help=False)
    quiet.add_argument("--quiet", "-q", dest="progress", action="store_false",
                       help="no progress line on stderr")

    demo = sub.add_parser("demo", help="write a synthetic dataset and stream it")
    demo.add_argument("--path", default="demo_data", help="dataset folder (default: demo_data)")
    demo.add_argument("--batch-size", type=_positive_int, default=4096)

    inspect = sub.add_parser("inspect", parents=[quiet],
                             help="describe a Parquet dataset and what stoker makes of it")
    inspect.add_argument("uri", help="a Parquet file, folder, glob or URI (s3://...)")
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    add_loader_arguments(inspect)

    bench = sub.add_parser("bench", parents=[quiet],
                           help="measure stoker on a dataset and name the bottleneck")
    bench.add_argument("uri", help="a Parquet file, folder, glob or URI (s3://...)")
    stop = bench.add_mutually_exclusive_group()
    stop.add_argument("--batches", type=_positive_int, help="stop after this many batches")
    stop.add_argument("--seconds", type=_positive_float,
                      help="stop after this many seconds (default: 10 when --batches is not given)")
    bench.add_argument("--step-ms", type=_non_negative_float, default=0.0,
                       help="busy-wait this long per batch, standing in for the training step")
    bench.add_argument("--no-progress", dest="progress", action="store_false",
                       help="the same as --quiet")
    add_loader_arguments(bench)

    cache = sub.add_parser("cache", help="inspect or clear a node-local cache folder")
    cache_sub = cache.add_subparsers(dest="cache_command", required=True)
    for name, text in (("stats", "entries and bytes per kind"), ("clear", "remove every entry")):
        action = cache_sub.add_parser(name, help=text, parents=[quiet])
        action.add_argument("cache_dir", help="the cache_dir given to stoker.Loader")
        if name == "stats":
            action.add_argument("--json", action="store_true", help="print the numbers as JSON")
    return parser


# Defaults of `stoker bench` that differ from the Loader's: a fixed seed, so that two runs read
# the same order.
BENCH_DEFAULTS = {"seed": 0}


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
            from ._cli_options import loader_options

            return run_inspect(args.uri, as_json=args.json, progress=args.progress,
                               **loader_options(args))
        elif args.command == "bench":
            from ._cli_bench import run_bench
            from ._cli_options import loader_options

            run_bench(args.uri, loader_options(args, BENCH_DEFAULTS), args.batches, args.seconds,
                      step_ms=args.step_ms, progress=args.progress)
        elif args.command == "cache":
            from ._cli_cache import run_cache

            return run_cache(args.cache_command, args.cache_dir, getattr(args, "json", False),
                             progress=args.progress)
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
