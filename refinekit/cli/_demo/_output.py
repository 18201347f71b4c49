"""How the demo writes: lines with colour only on a terminal, never an API key; its headers."""

from __future__ import annotations

import os
import textwrap
from typing import TYPE_CHECKING, Any, TextIO, cast

from ..._core.redact import safe_url
from ..._core.types import Usage
from ..._providers.replies import first_message, message_text
from ...testing import ScriptedOpenAI
from .._pipe import PipeSafe
from ._config import Endpoint
from ._scenarios import SCRIPTED_JUDGE, SCRIPTED_MODEL

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion

__all__ = ["Output", "header_local", "header_real", "header_scripted", "text_of", "usage_line"]

_WIDTH = 100


def _wants_colour(out: TextIO) -> bool:
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


class Output:
    """Writes lines, with colour only on a terminal, and never an API key."""

    def __init__(self, out: TextIO, secret: str | None) -> None:
        # a reader that goes away (`| head`) stops the demo, quietly: its work is what it shows
        self.out = cast(TextIO, PipeSafe(out, stop=True))
        self.colour = _wants_colour(out)
        self.secret = secret

    def __call__(self, text: str = "") -> None:
        if self.secret:
            text = text.replace(self.secret, "***")
        print(text, file=self.out, flush=True)

    def wrapped(self, first: str, text: str, indent: int) -> None:
        lines = textwrap.wrap(
            text, _WIDTH, initial_indent=first, subsequent_indent=" " * indent
        ) or [first]
        for line in lines:
            self(line)

    def quoted(self, text: str) -> None:
        """Show a model's text (or a message sent) as an indented block."""
        for paragraph in text.strip().splitlines() or [""]:
            for line in textwrap.wrap(paragraph, _WIDTH - 7) or [""]:
                self(f"     | {line}".rstrip())

    def _paint(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour else text

    def good(self, text: str) -> str:
        return self._paint("32", text)

    def bad(self, text: str) -> str:
        return self._paint("31", text)

    def head(self, text: str) -> str:
        return self._paint("1", text)


def text_of(reply: ChatCompletion) -> str:
    """A reply's text, as the model sent it ("" when it has none)."""
    return message_text(first_message(reply))


def usage_line(who: str, usage: Usage) -> str:
    return (
        f"{who} calls: {usage.model_calls}, tokens: {usage.total_tokens} "
        f"({usage.prompt_tokens} prompt + {usage.completion_tokens} completion)"
    )


def header_scripted(say: Output, server: ScriptedOpenAI) -> None:
    say(say.head("refinekit demo: SCRIPTED replies, over real HTTP"))
    for line in textwrap.wrap(
        f"A ScriptedOpenAI server on {server.base_url} plays the answering model "
        f"({SCRIPTED_MODEL}) and the judge ({SCRIPTED_JUDGE}); both are called with the real "
        "openai client. The replies are scripted, so this run proves the wiring (requests, "
        "the judge's verdicts with logprobs, feedback, correction turns, usage), not a "
        "model's quality.",
        _WIDTH - 2,
    ):
        say(f"  {line}")
    say("  Against a real endpoint: refinekit demo --base-url URL --model NAME --judge-model NAME")
    say("  (the API key, if the endpoint needs one, is read from OPENAI_API_KEY).")


def header_real(say: Output, endpoint: Endpoint) -> None:
    say(say.head(f"refinekit demo: a REAL endpoint, {safe_url(endpoint.base_url)}"))
    key = (
        "from OPENAI_API_KEY (not shown)"
        if endpoint.key_from_env
        else "OPENAI_API_KEY not set, sending 'not-needed' (for local servers that ignore it)"
    )
    say(f"  answer model: {endpoint.model}; judge model: {endpoint.judge_model}")
    say(f"  API key: {key}")
    say("  The replies come from the models: the path may differ from the scripted run (a first")
    say("  draft may already pass, a first extraction may already be valid).")


def header_local(say: Output, local: Any) -> None:
    say(say.head(f"refinekit demo: a REAL tiny model on this machine, {local.base_url}"))
    for line in textwrap.wrap(
        "llama.cpp's OpenAI-compatible server runs SmolLM2-135M-Instruct on the CPU. A small "
        "batch runs on it twice, bare and decorated, with the quality benchmark's code: the "
        "figures below are what this run produced, for every item of the batch, with a line "
        "for each item a correction or a retry changed. A 135M-parameter model gets many "
        "values wrong; what the decorators guarantee is that the caller gets a valid value, "
        "an answer that passed, or a typed error, never a value with a hole in it.",
        _WIDTH - 2,
    ):
        say(f"  {line}")
