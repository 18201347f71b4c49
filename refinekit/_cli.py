"""The `refinekit` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `refinekit` command; return its exit status."""
    parser = argparse.ArgumentParser(
        prog="refinekit", description="Make LLM answer functions trustworthy by decoration."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser(
        "demo", help="run both decorators end to end, offline, with a stand-in model"
    )
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ._demo import run_demo

        return run_demo(sys.stdout)
    parser.print_help()
    return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
