"""A decorated call's arguments, bound to the function's parameters and made a judge's request.

Every decorator that judges finds the question, the answer and the context the same way:
`RequestMaker` is built once, when decorating, and used on each call.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .._core.types import ContextDocument, EvaluationRequest, ToolCall
from .._providers.replies import answer_text

__all__ = ["QuestionSelector", "RequestMaker", "as_text", "function_name"]

QuestionSelector = str | Callable[[Mapping[str, Any]], str]
"""Which argument is the question: a parameter name, or a callable of the bound arguments."""


def function_name(fn: Callable[..., Any]) -> str:
    """A callable's name for events and messages: its qualified name, or its class's.

    A `functools.partial` is named after the function it wraps.
    """
    while isinstance(fn, functools.partial):
        fn = fn.func
    name = getattr(fn, "__qualname__", None)
    return name if isinstance(name, str) else type(fn).__qualname__


def as_text(value: Any) -> str:
    """An argument or answer as text: a str as is, None as "", anything else as JSON."""
    return value if isinstance(value, str) else answer_text(value)


class RequestMaker:
    """How the calls of one decorated function become `EvaluationRequest`s.

    Args:
        fn: The decorated function.
        question: Which argument is the question (see `question_of`). None: the parameter
            named `question`, else the first `str` argument.
        answer: A callable turning the return value into the text to judge; None:
            `answer_text` (a str as is, a completion's text, anything else as JSON).
        context: A callable of the bound arguments returning context documents.
        option: The decorator's name for `question`, for messages (`"input"` in `@guarded`).

    Raises:
        ValueError: `question` names no parameter of `fn`.
    """

    __slots__ = (
        "answer",
        "context",
        "defaults",
        "function",
        "names",
        "option",
        "plain",
        "question",
        "signature",
    )

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        question: QuestionSelector | None = None,
        answer: Callable[[Any], str] | None = None,
        context: Callable[[Mapping[str, Any]], Iterable[Any]] | None = None,
        option: str = "question",
    ) -> None:
        self.function = function_name(fn)
        self.signature = inspect.signature(fn)
        params = list(self.signature.parameters.values())
        # Only positional-or-keyword parameters: `bind` can skip `Signature.bind` (see there).
        self.plain = all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params)
        self.names = tuple(p.name for p in params)
        self.defaults = tuple(p.default for p in params)
        if isinstance(question, str) and question not in self.names:
            raise ValueError(
                f"{option}={question!r} names no parameter of {self.function}{self.signature}"
            )
        self.question = question
        self.answer = answer
        self.context = context
        self.option = option

    def bind(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], *, strict: bool = False
    ) -> dict[str, Any] | None:
        """The call's arguments by parameter name, defaults applied, in declaration order.

        None when they do not fit the signature; with `strict`, `TypeError` instead.
        """
        if self.plain and len(args) <= len(self.names):
            # The common case, at a fraction of `Signature.bind`'s cost and with the same result
            # (every parameter, in declaration order, defaults applied). Anything unusual (an
            # unknown or duplicated keyword, a missing argument) goes the general way below.
            arguments = dict(zip(self.names, args, strict=False))
            given = 0
            empty = inspect.Parameter.empty
            n = len(args)
            for name, default in zip(self.names[n:], self.defaults[n:], strict=True):
                if name in kwargs:
                    arguments[name] = kwargs[name]
                    given += 1
                elif default is not empty:
                    arguments[name] = default
                else:
                    break
            else:
                if given == len(kwargs):
                    return arguments
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            if strict:
                raise
            return None
        bound.apply_defaults()
        return dict(bound.arguments)

    def question_of(self, arguments: Mapping[str, Any]) -> str | None:
        """The question's text; None when no argument is the question.

        The selector's argument (a callable's result must be a `str`), else the parameter
        named `question`, else the first `str` argument; a value that is not a `str` is
        written as JSON, None as "".

        Raises:
            TypeError: The `question` callable returned something else than a `str`.
        """
        selector = self.question
        if callable(selector):
            text = selector(arguments)
            if not isinstance(text, str):
                raise TypeError(
                    f"{self.option}= of {self.function} must return a str, "
                    f"got {type(text).__name__}"
                )
            return text
        if isinstance(selector, str):
            return as_text(arguments.get(selector))
        if "question" in arguments:
            return as_text(arguments["question"])
        return next((v for v in arguments.values() if isinstance(v, str)), None)

    def answer_of(self, value: Any) -> str:
        """The return value as the text to judge (see `answer`)."""
        if self.answer is None:
            return answer_text(value)
        text = self.answer(value)
        if not isinstance(text, str):
            raise TypeError(
                f"answer= of {self.function} must return a str, got {type(text).__name__}"
            )
        return text

    def request(
        self,
        arguments: Mapping[str, Any],
        value: Any,
        recorded: Iterable[ContextDocument],
        number: int,
        tool_calls: Iterable[ToolCall],
    ) -> EvaluationRequest:
        """The request to judge attempt `number`'s return value with.

        Args:
            arguments: The bound arguments (`bind`).
            value: What the function returned.
            recorded: Documents recorded with `record_context()` during the attempt (after
                those `context` gives).
            number: The attempt's number, for the metadata.
            tool_calls: The tool calls recorded during the attempt.
        """
        question = self.question_of(arguments) or ""
        answer = self.answer_of(value)
        documents: list[ContextDocument] = []
        if self.context is not None:
            given = self.context(arguments)
            if isinstance(given, (str, ContextDocument, Mapping)):
                given = [given]
            documents.extend(ContextDocument.coerce(d) for d in given)
        documents.extend(recorded)
        return EvaluationRequest(
            question=question,
            answer=answer,
            context=tuple(documents),
            metadata={"function": self.function, "attempt": number},
            tool_calls=tuple(tool_calls),
        )
