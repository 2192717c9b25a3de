"""The `stoker` command line (also `python -m stoker`)."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

__all__ = ["main"]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="stoker", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="write a synthetic dataset and stream it")
    demo.add_argument("--path", default="demo_data", help="dataset folder (default: demo_data)")
    demo.add_argument("--batch-size", type=int, default=4096)
    args = parser.parse_args(argv)

    from .errors import StokerError

    try:
        if args.command == "demo":
            from ._demo import run_demo

            run_demo(args.path, args.batch_size)
    except StokerError as error:
        print(f"stoker: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
