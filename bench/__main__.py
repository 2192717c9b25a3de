"""``python -m bench [--smoke | --quick | --full]``: stoker against its peers, side by side."""

from __future__ import annotations

import argparse
import os
import sys

from .suite import HERE, run_suite


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--smoke", dest="profile", action="store_const", const="smoke",
                      help="tiny data, one repeat: proves every runner works (seconds)")
    size.add_argument("--quick", dest="profile", action="store_const", const="quick",
                      help="the default: a few minutes on 2 cores")
    size.add_argument("--full", dest="profile", action="store_const", const="full",
                      help="64 MiB row groups, GBs of data, more repeats")
    parser.add_argument("--name", help="report name (default: the profile; 'matrix' with --matrix)")
    parser.add_argument("--matrix", action="store_true",
                        help="the shape matrix (issue 26): one table of ratios against the "
                             "strongest limits per shape; small datasets unless --full")
    parser.add_argument("--shapes", help="with --matrix: comma-separated subset of the shapes")
    parser.add_argument("--tiny", type=int, metavar="ROWS",
                        help="with --matrix: every shape at this many rows (tests)")
    parser.add_argument("--threads", type=int, help="with --matrix: threads (default min(cores, 2))")
    parser.add_argument("--runners", help="comma-separated subset, e.g. stoker,limit")
    parser.add_argument("--workloads", help="comma-separated subset of tabular-snappy,tabular-zstd,images")
    parser.add_argument("--repeats", type=int, help="override the profile's repeat count")
    parser.add_argument("--no-stall", dest="stall", action="store_false",
                        help="skip the stall-meter pass")
    parser.add_argument("--no-install", dest="install", action="store_false",
                        help="do not pip-install bench/requirements-nodeps.txt when missing")
    parser.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    parser.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    parser.add_argument("--render", metavar="JSON",
                        help="only rewrite the .md and .png of an existing report")
    args = parser.parse_args(argv)
    if args.render:
        import json

        from .report import write_all

        with open(args.render) as f:
            report = json.load(f)
        base = os.path.splitext(args.render)[0]
        print(write_all(report, os.path.dirname(base) or ".", os.path.basename(base)))
        return 0
    profile = args.profile or "quick"
    split = lambda s: [x.strip() for x in s.split(",") if x.strip()] if s else None  # noqa: E731
    if args.matrix:
        from .matrix import run_matrix

        run_matrix(args.data_dir, args.out_dir, args.name or "matrix", shapes=split(args.shapes),
                   repeats=args.repeats or (1 if profile == "smoke" else 3),
                   full=profile == "full", tiny=args.tiny, threads=args.threads)
        return 0
    run_suite(profile, args.name or profile, args.data_dir, args.out_dir,
              runners=split(args.runners), workloads=split(args.workloads), repeats=args.repeats,
              stall=args.stall, install=args.install)
    return 0


if __name__ == "__main__":
    sys.exit(main())
