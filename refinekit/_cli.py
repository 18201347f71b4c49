"""The `refinekit` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

_DEMO_DESCRIPTION = """\
Run both decorators end to end over HTTP with the real openai client: a refund answer judged
by a criteria judge and retried with its feedback, and an invoice extraction corrected twice
into a typed Invoice.

With no options, a scripted OpenAI-compatible server on 127.0.0.1 plays both models: the run
proves the wiring, not a model's quality. With --base-url, --model and --judge-model the same
scenarios run against a real endpoint (OpenAI, Ollama, vLLM, llama.cpp, LM Studio, ...)."""

_DEMO_EPILOG = """\
environment:
  OPENAI_BASE_URL  the default of --base-url
  OPENAI_API_KEY   the API key; it is read from the environment only (there is no option for
                   it, so it stays out of shell history) and never printed. Without it,
                   'not-needed' is sent, for local servers that ignore the key.

example (Ollama):
  refinekit demo --base-url http://localhost:11434/v1 --model qwen2.5 --judge-model qwen2.5"""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `refinekit` command; return its exit status.

    Args:
        argv: The arguments after the program's name; None for `sys.argv[1:]`.

    Returns:
        The exit status: 0 on success, 1 when the demo did not end as expected, 2 on a usage
        error.
    """
    parser = argparse.ArgumentParser(
        prog="refinekit", description="Make LLM answer functions trustworthy by decoration."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="run both decorators end to end over HTTP (scripted, or against a real endpoint)",
        description=_DEMO_DESCRIPTION,
        epilog=_DEMO_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument(
        "--base-url",
        metavar="URL",
        help="an OpenAI-compatible API, e.g. http://localhost:11434/v1 (default: $OPENAI_BASE_URL)",
    )
    demo.add_argument("--model", metavar="NAME", help="the answering model")
    demo.add_argument("--judge-model", metavar="NAME", help="the judge model (may be the same)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ._demo import DemoConfigError, endpoint_from_options, run_demo

        try:
            endpoint = endpoint_from_options(
                args.base_url, args.model, args.judge_model, os.environ
            )
        except DemoConfigError as e:
            demo.print_usage(sys.stderr)
            print(f"refinekit demo: error: {e}", file=sys.stderr)
            return 2
        return run_demo(sys.stdout, endpoint)
    parser.print_help()
    return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
