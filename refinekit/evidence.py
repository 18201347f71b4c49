"""What the judge sees: the judging state built from a conversation, tool calls included.

An agent's answer is only as good as the tool results it was built on. `from_messages` turns
an OpenAI-style conversation (system, user and assistant messages, assistant `tool_calls`, and
`tool` messages) into a `JudgingState`: an `EvaluationRequest` every judge accepts, carrying
the conversation so far, the final answer, every tool call paired with its result, the
successful results as context documents, and what is wrong with the trace::

    from refinekit import evidence, judges

    state = evidence.from_messages(messages)
    verdict = judges.criteria(jm, [
        judges.Criterion("used_lookup", evidence.called("lookup_order")),
        judges.Criterion(
            "grounded",
            "Is every value in the answer supported by a result in tool_calls?",
            when_false="State only values a tool returned.",
        ),
    ]).evaluate(state)

A state with trace issues (a result no call matches, a call that never got a result) or
larger than its `max_chars` is not judged: the judge returns an `inconclusive` verdict and no
judge model is called. See docs/evidence.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import field_validator

from ._core.jsonload import MAX_DEPTH, TooDeep
from ._core.types import ContextDocument, EvaluationRequest, ToolCall, ValueEvidence, Verdict
from ._structure.stated import json_values, prose_values, where

__all__ = ["JudgingState", "called", "from_messages", "stated_values"]

DEFAULT_MAX_CHARS = 20_000
"""The default `max_chars` of `from_messages`."""

_ROLES = ("system", "developer", "user", "assistant", "tool")
_MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")
_CALL_KEYS = ("id", "type", "function", "custom")


def _check_max_chars(value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"max_chars must be a positive int or None, got {value!r}")


class JudgingState(EvaluationRequest):
    """The judging state of a conversation: an `EvaluationRequest` with the evidence in it.

    Every judge accepts it in place of a plain `EvaluationRequest` (it is one). Build it with
    `from_messages`, or directly with the `EvaluationRequest` fields. A judge asked to judge a
    state with `trace_issues` returns an `inconclusive` verdict (`INCOMPLETE_JUDGING_EVIDENCE`),
    and one whose JSON is longer than `max_chars` an `inconclusive` verdict
    (`JUDGE_STATE_LIMIT`), both without calling the judge model.

    Attributes:
        question: The conversation before the answer, one block per message, each prefixed
            with its role (`user_question`).
        answer: The final answer (`assistant_answer`).
        context: A document per successful tool result (`supporting_context`).
        tool_calls: Every tool call with its arguments and result, in the order they were made.
        trace_issues: What is wrong with the trace, in words.
        max_chars: The most characters the serialised state may have for a judge.
    """

    @field_validator("max_chars")
    @classmethod
    def _positive_max_chars(cls, value: int | None) -> int | None:
        _check_max_chars(value)
        return value

    @property
    def user_question(self) -> str:
        """The system message and the user and assistant turns, each prefixed with its role."""
        return self.question

    @property
    def assistant_answer(self) -> str:
        """The final answer being judged."""
        return self.answer

    @property
    def supporting_context(self) -> tuple[ContextDocument, ...]:
        """The successful tool results, each a document paired with its call."""
        return self.context


# --- reading messages ----------------------------------------------------------------------------


def _fields(value: Any, keys: Sequence[str], what: str) -> dict[str, Any]:
    """The `keys` of a dict, an openai (pydantic) object or any object with those attributes."""
    source: Any = value
    if not isinstance(value, Mapping):
        dump = getattr(value, "model_dump", None)
        if callable(dump):
            source = dump()
        elif any(hasattr(value, key) for key in keys):
            return {key: getattr(value, key, None) for key in keys}
        if not isinstance(source, Mapping):
            raise TypeError(
                f"{what} must be a dict or an openai message object, not {type(value).__name__}"
            )
    return {key: source.get(key) for key in keys}


def _text(content: Any, what: str) -> str:
    """A message's text: a str as is, the text parts of a list of content parts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, (bytes, bytearray)):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
                continue
            fields = _fields(part, ("type", "text"), f"a content part of {what}")
            text = fields["text"]
            if isinstance(text, str) and fields["type"] in (None, "text"):
                texts.append(text)
        return "\n".join(texts)
    raise TypeError(
        f"the content of {what} must be a str, a list of content parts or None, "
        f"not {type(content).__name__}"
    )


def _blank(value: Any, key: str, what: str) -> str | None:
    """An optional str field; None and "" are both blank (None)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise TypeError(f"{what}: {key!r} must be a str or None, not {type(value).__name__}")
    return value


def _arguments(value: Any, what: str) -> str:
    if value is None:
        return "{}"
    if isinstance(value, str):
        return value
    if isinstance(value, (Mapping, list, tuple)):
        try:
            return json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError) as exc:  # e.g. a circular structure
            raise TypeError(f"{what}: arguments cannot be rendered as JSON: {exc}") from None
    raise TypeError(f"{what}: arguments must be a JSON str or a dict, not {type(value).__name__}")


@dataclass
class _Call:
    name: str
    arguments: str
    id: str | None
    where: str
    result: str | None = None

    @property
    def open(self) -> bool:
        return self.result is None

    def describe(self) -> str:
        return f"tool call {self.name!r}" + (f" (id {self.id!r})" if self.id else "")


def _calls_of(tool_calls: Any, where: str) -> list[_Call]:
    """An assistant message's tool calls."""
    if tool_calls is None:
        return []
    if isinstance(tool_calls, (str, bytes, Mapping)) or not isinstance(tool_calls, Sequence):
        raise TypeError(
            f"{where}: 'tool_calls' must be a list of tool calls, not {type(tool_calls).__name__}"
        )
    calls = []
    for j, raw in enumerate(tool_calls):
        what = f"{where}.tool_calls[{j}]"
        call = _fields(raw, _CALL_KEYS, what)
        kind = call["type"] or "function"
        if kind not in ("function", "custom"):
            raise ValueError(f"{what}: unsupported tool call type {kind!r}")
        body = call[kind]
        if body is None:
            raise ValueError(f"{what}: a {kind!r} tool call needs a {kind!r} entry with its name")
        spec = _fields(body, ("name", "arguments", "input"), f"{what}.{kind}")
        name = spec["name"]
        if not isinstance(name, str) or not name:
            raise ValueError(f"{what}: the tool call has no name (a non-empty str)")
        arguments = spec["arguments"] if kind == "function" else spec["input"]
        calls.append(
            _Call(
                name=name,
                arguments=_arguments(arguments, what),
                id=_blank(call["id"], "id", what),
                where=what,
            )
        )
    return calls


def _pair(calls: list[_Call], call_id: str | None, name: str | None) -> _Call | None:
    """The earliest open call a result goes to, or None.

    Ids are compared where both sides have one; where either leaves it blank, the tool names.
    """
    if call_id is not None:
        for call in calls:
            if call.open and call.id == call_id:
                return call
        candidates = [c for c in calls if c.open and c.id is None]
    else:
        candidates = [c for c in calls if c.open]
    if name is None:
        return None
    return next((c for c in candidates if c.name == name), None)


def _is_error(result: str) -> bool:
    return result.lstrip().lower().startswith("error:")


def from_messages(
    messages: Sequence[Any],
    answer: str | None = None,
    max_chars: int | None = DEFAULT_MAX_CHARS,
) -> JudgingState:
    """Build the judging state of an OpenAI-style conversation.

    Messages are dicts (as sent to the Chat Completions API) or openai message objects
    (anything with `model_dump()`, such as `completion.choices[0].message`); roles are
    `system`, `developer`, `user`, `assistant` and `tool`. Nothing given is modified.

    Each tool result (a `tool` message) goes to the earliest open call with the same
    `tool_call_id`. Where the provider leaves ids blank (None or ""), it goes to the earliest
    open call with the same tool name (the tool message's `name`). So parallel calls, and ids
    reused across turns, stay apart; calls of earlier turns are included. A result no open call
    matches, and a call that never got a result, are trace issues.

    Args:
        messages: The conversation, oldest first.
        answer: The answer to judge. None: the last assistant message's text (which is then
            left out of `user_question`); "" when that message only calls tools. When given
            and the conversation ends with an assistant message saying exactly that, the
            message is left out of `user_question` too.
        max_chars: The most characters the serialised state may have for a judge (a judge
            returns an `inconclusive` `JUDGE_STATE_LIMIT` verdict above it); None for no limit.

    Returns:
        The state: `user_question` (each message before the answer as `role: text`, system,
        developer, user and assistant text only), `assistant_answer`, `tool_calls` (every
        call, with its result, or None without one; `ok` is False for a result starting with
        `error:` and for a call without a result), `supporting_context` (a document per
        successful result, its source `tool:<name>#<id>`) and `trace_issues`.

    Raises:
        TypeError: `messages` is not a list of messages, or a message, its content or its
            tool calls have the wrong type.
        ValueError: A message has no role or an unknown one, a tool call has no name, or
            `max_chars` is not a positive int or None.
    """
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise TypeError(
            "from_messages takes a list of messages (dicts or openai message objects), "
            f"not {type(messages).__name__}"
        )
    if answer is not None and not isinstance(answer, str):
        raise TypeError(f"answer must be a str or None, not {type(answer).__name__}")
    _check_max_chars(max_chars)

    read: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        fields = _fields(message, _MESSAGE_KEYS, where)
        role = fields["role"]
        if role is None or role == "":
            raise ValueError(f"{where} has no 'role'")
        if not isinstance(role, str):
            raise TypeError(f"{where}: 'role' must be a str, not {type(role).__name__}")
        if role not in _ROLES:
            raise ValueError(f"{where}: unknown role {role!r}; expected one of {', '.join(_ROLES)}")
        fields["text"] = _text(fields["content"], where)
        fields["where"] = where
        read.append(fields)

    # The message holding the answer, left out of user_question.
    answer_at: int | None = None
    if answer is None:
        assistants = [i for i, m in enumerate(read) if m["role"] == "assistant"]
        if assistants:
            answer_at = assistants[-1]
            answer = read[answer_at]["text"]
        else:
            answer = ""
    elif read and read[-1]["role"] == "assistant" and read[-1]["text"].strip() == answer.strip():
        answer_at = len(read) - 1

    turns: list[str] = []
    calls: list[_Call] = []
    issues: list[str] = []
    for i, fields in enumerate(read):
        role, text, where = fields["role"], fields["text"], fields["where"]
        if role == "tool":
            call_id = _blank(fields["tool_call_id"], "tool_call_id", where)
            name = _blank(fields["name"], "name", where)
            call = _pair(calls, call_id, name)
            if call is not None:
                call.result = text
            elif call_id is None and name is None:
                issues.append(
                    f"{where}: a tool result with neither a tool_call_id nor a name cannot be "
                    "paired with a call"
                )
            else:
                described = " ".join(
                    part
                    for part in (
                        f"id {call_id!r}" if call_id else "",
                        f"tool {name!r}" if name else "",
                    )
                    if part
                )
                issues.append(f"{where}: the tool result ({described}) matches no open tool call")
            continue
        if role == "assistant":
            calls.extend(_calls_of(fields["tool_calls"], where))
        if i != answer_at and text.strip():
            turns.append(f"{role}: {text}")

    tool_calls: list[ToolCall] = []
    context: list[ContextDocument] = []
    for call in calls:
        if call.result is None:
            issues.append(f"{call.where}: {call.describe()} never got a result")
            ok = False
        else:
            ok = not _is_error(call.result)
        tool_calls.append(
            ToolCall(
                name=call.name, arguments=call.arguments, result=call.result, id=call.id, ok=ok
            )
        )
        if ok and call.result is not None:
            context.append(
                ContextDocument(
                    text=call.result,
                    source=f"tool:{call.name}" + (f"#{call.id}" if call.id else ""),
                    metadata={"name": call.name, "arguments": call.arguments, "id": call.id},
                )
            )
    return JudgingState(
        question="\n\n".join(turns),
        answer=answer,
        context=tuple(context),
        tool_calls=tuple(tool_calls),
        trace_issues=tuple(issues),
        max_chars=max_chars,
    )


def called(tool_name: str, *, ok: bool = True) -> Callable[[EvaluationRequest], Verdict]:
    """A code check that a tool was called: for `judges.Criterion`, or as an evaluator.

    Whether a tool was called at all is a fact of the trace, not something to ask a model::

        judges.Criterion("looked_up_the_order", evidence.called("lookup_order"))

    Args:
        tool_name: The tool's name, as in `tool_calls`.
        ok: True: only a successful call counts (one with a result not starting with
            `error:`); False: any call counts.

    Returns:
        A check `(request) -> Verdict` that passes when `request.tool_calls` has such a call;
        its failing verdict's feedback names the tool.

    Raises:
        TypeError: `tool_name` is not a str.
        ValueError: `tool_name` is empty.
    """
    if not isinstance(tool_name, str):
        raise TypeError(f"called() takes the tool's name, a str, not {type(tool_name).__name__}")
    if not tool_name:
        raise ValueError("called() takes the tool's name, a non-empty str")

    def check(request: EvaluationRequest) -> Verdict:
        calls = [c for c in request.tool_calls if c.name == tool_name]
        counted = [c for c in calls if c.ok and c.result is not None] if ok else calls
        if counted:
            return Verdict(passed=True, score=1.0, metadata={"tool": tool_name})
        if calls:
            feedback = (
                f"The tool {tool_name!r} was called but never succeeded: call it successfully "
                "and build the answer on its result."
            )
        else:
            feedback = (
                f"The tool {tool_name!r} was not called: call it and build the answer on "
                "its result."
            )
        return Verdict(passed=False, score=0.0, feedback=feedback, metadata={"tool": tool_name})

    check.__name__ = check.__qualname__ = f"called({tool_name!r})"
    return check


# --- the values an answer states, and where the context states it ---------------------------


def _documents(request: EvaluationRequest) -> list[tuple[str, str]]:
    """The texts an answer's values may come from, each with its name (`ValueEvidence.source`)."""
    named = [(d.source or f"context[{i}]", d.text) for i, d in enumerate(request.context)]
    held = {text for _, text in named}
    for j, call in enumerate(request.tool_calls):
        if call.ok and call.result is not None and call.result not in held:
            named.append((f"tool_calls[{j}]", call.result))
    if request.question:
        named.append(("question", request.question))
    return named


def stated_values(request: EvaluationRequest) -> tuple[ValueEvidence, ...]:
    """The values an answer states, each with where the context states it: a value-level record.

    What a judge (or a code criterion, `judges.Criterion(name, function)`) can read to see
    whether each value of an answer has a source, and which. The values an answer states:

    - a JSON answer (an object or an array): every string and number in it, at its field
      path (`vendor`, `lines[0].sku`; the first 500);
    - a prose answer: every number written in digits (`12.50`, `1,020`, `15%`; not part of
      a word or a code such as `FA00731`) and every quoted name (in straight or curly double
      or single quotes, or guillemets: `"Acme Ltd"`, `'Acme Ltd'`), path "", each value
      once; a citation of a context document's source (`[policies/warranty-1.md]`) states
      no value.

    Each is looked up as grounding compares (`InSource`, `refinekit.provenance`): a string
    case- and space-blind, at word boundaries when it can be; a number by value (`12.5` is
    stated by `12.50 EUR`), a percentage only by a percentage. A prose answer's number is
    also stated by the same number written as a word in a document ("two hours" states 2).
    The texts, in this order: the context documents (`source`: the document's source, or
    its position `context[2]` when it has none), the results of tool calls that succeeded
    and are not already a document (`tool_calls[1]`), and the question (`question`: an
    answer may repeat the order number it was asked about). The first text that states the
    value gives its span: `text[start:end]` of that document is `text`. A value no text
    states has `text`, `start`, `end` and `source` None (`found` is False). A number is
    compared exactly as written, over the whole text (`1e400` is not 1, and a 29-digit number
    is not its neighbour); a name in the first 20,000 characters of each text.

    Args:
        request: The answer and its context (an `EvaluationRequest`, or a `JudgingState`).

    Returns:
        One `ValueEvidence` per stated value, in the order the answer states them.

    Raises:
        TypeError: `request` is not an `EvaluationRequest`.
        ValueError: The answer is JSON nested more than 200 levels deep (as refinekit reads
            JSON it did not write everywhere: past that, no step could walk it).
    """
    if not isinstance(request, EvaluationRequest):
        raise TypeError(f"stated_values() takes an EvaluationRequest, not {type(request).__name__}")
    try:
        from_json = json_values(request.answer)
    except TooDeep:
        raise ValueError(
            f"stated_values(): the answer is JSON nested more than {MAX_DEPTH} levels deep"
        ) from None
    if from_json is not None:
        values = from_json
    else:
        # a citation of a document's source is no stated value (`warranty-1.md` holds no 1)
        prose = request.answer
        for source in sorted({d.source for d in request.context if d.source}, key=len)[::-1]:
            prose = prose.replace(source, " " * len(source))
        values = prose_values(prose)
    documents = _documents(request)
    records = []
    for stated in values:
        record = ValueEvidence(path=stated.path, value=stated.written)
        for name, text in documents:
            place = where(stated, text, words=from_json is None)
            if place is not None:
                record = ValueEvidence(
                    path=stated.path,
                    value=stated.written,
                    text=place.text,
                    start=place.start,
                    end=place.end,
                    source=name,
                )
                break
        records.append(record)
    return tuple(records)
