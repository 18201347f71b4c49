"""`retry_prompt`: put a rejected answer and its feedback where a model acts on them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, overload

from .._engine.job import current_attempt
from .._providers.replies import answer_text

__all__ = ["retry_prompt"]


@overload
def retry_prompt(
    prompt: str, *, rejected: str | None = None, feedback: str | None = None
) -> str: ...


@overload
def retry_prompt(
    prompt: list[dict[str, Any]], *, rejected: str | None = None, feedback: str | None = None
) -> list[dict[str, Any]]: ...


def retry_prompt(
    prompt: str | list[dict[str, Any]],
    *,
    rejected: str | None = None,
    feedback: str | None = None,
) -> str | list[dict[str, Any]]:
    """The prompt of a retry: the original prompt, the rejected answer, then the feedback.

    Inside a function decorated with `@retry_on_low_quality`, build the prompt as on the first
    attempt and pass it through: on a retry it comes back with two lines added, the latest
    rejected answer and the latest rejection's feedback::

        <your prompt>

        Your answer was: The warranty is 10 months.
        Cite the source as [policies/warranty-1.md].

    and on the first attempt (or outside a decorated function) it comes back unchanged. The
    feedback is the last line, as an instruction; the rejected answer is quoted so that the
    model can keep what was right in it. On a 135M model this placement rescued 13 and 12 of
    the rejected answers on two seeds, where "Your last answer was rejected: <feedback>"
    appended to the prompt rescued 3 and 9 (docs/local_model.md). Only the latest answer and
    feedback are added, so retries never pile up in the prompt.

    Args:
        prompt: The prompt as on the first attempt: a str, or a list of chat messages (a new
            list is returned: the text is added to its last message when that is a user
            message with text content, else as a new user message; the caller's list and
            dicts are left as they are).
        rejected: The rejected answer's text. Default: the previous attempt's answer from
            `refinekit.current_attempt()`, as text (a str as is, a `ChatCompletion`'s message
            text, a pydantic model as JSON). When there is none (the function raised
            `LowQualityAnswer` without `answer=`), only the feedback is added.
        feedback: The feedback to act on. Default: the latest rejection's feedback from
            `refinekit.current_attempt()`; when there is none (the first attempt), the prompt
            is returned unchanged.

    Returns:
        The prompt for this attempt, of the same type as `prompt`.

    Raises:
        TypeError: `prompt` is neither a str nor a list of message dicts, or `rejected` or
            `feedback` is not a str.
    """
    for name, value in (("rejected", rejected), ("feedback", feedback)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"retry_prompt(): {name} must be a str, got {type(value).__name__}")
    messages = _messages(prompt)
    attempt = current_attempt()
    if feedback is None and attempt is not None:
        feedback = attempt.feedback
    if rejected is None and attempt is not None and attempt.previous_answer is not None:
        rejected = answer_text(attempt.previous_answer)
    if not feedback:
        return prompt if messages is None else messages
    added = (f"Your answer was: {rejected}\n" if rejected else "") + feedback
    if messages is None:
        assert isinstance(prompt, str)
        return f"{prompt}\n\n{added}"
    last = messages[-1] if messages else None
    if last is not None and last.get("role") == "user" and isinstance(last.get("content"), str):
        messages[-1] = {**last, "content": f"{last['content']}\n\n{added}"}
    else:
        messages.append({"role": "user", "content": added})
    return messages


def _messages(prompt: object) -> list[dict[str, Any]] | None:
    """A new list of (copied) messages, or None for a str prompt."""
    if isinstance(prompt, str):
        return None
    if isinstance(prompt, list):
        for i, message in enumerate(prompt):
            if not isinstance(message, Mapping):
                raise TypeError(
                    "retry_prompt() takes chat messages as dicts ({'role': ..., 'content': "
                    f"...}}); message {i} is a {type(message).__name__}"
                )
        return [dict(m) for m in prompt]
    raise TypeError(
        "retry_prompt() takes the prompt as a str or a list of chat messages (dicts), "
        f"not {type(prompt).__name__}"
    )
