"""`FakeJudge`: an evaluator that returns scripted verdicts in order and records its requests."""

from __future__ import annotations

import threading

from .._core.types import EvaluationRequest, Verdict

__all__ = ["FakeJudge"]


def _as_verdict(value: Verdict | bool | str, name: str) -> Verdict:
    if isinstance(value, Verdict):
        return value
    if isinstance(value, bool):
        return Verdict(
            passed=value,
            score=1.0 if value else 0.0,
            feedback="" if value else f"The answer failed the check {name!r}.",
        )
    if isinstance(value, str):
        word, _, feedback = value.partition(":")
        word = word.strip().lower()
        if word in ("pass", "fail"):
            passed = word == "pass"
            return Verdict(passed=passed, score=1.0 if passed else 0.0, feedback=feedback.strip())
        raise ValueError(
            f"fake judge {name!r}: a scripted verdict string is 'pass', 'fail' or "
            f"'fail: <feedback>', not {value!r}"
        )
    raise TypeError(
        f"fake judge {name!r}: a scripted verdict is a str, a bool or a refinekit.Verdict, "
        f"not {type(value).__name__}"
    )


class FakeJudge:
    """An evaluator that returns scripted verdicts in order and records every request.

    Use it wherever refinekit takes an evaluator, sync or async::

        judge = FakeJudge("fail: cite a source", "pass")

        @retry_on_low_quality(evaluator=judge)
        def answer(question: str) -> str: ...

        answer("What is the refund window?")
        assert len(judge.requests) == 2

    Asked for more verdicts than were scripted, it raises an `AssertionError` naming itself,
    so a test fails loudly instead of looping or passing by accident.

    Args:
        *verdicts: The verdicts, in the order they are returned: `"pass"`, `"fail"`,
            `"fail: <feedback>"` (case-insensitive), a bool, or a `refinekit.Verdict`.
        name: The evaluator's name, used in criteria and error messages.

    Attributes:
        name: The evaluator's name.
        requests: Every `EvaluationRequest` received, in order (including one asked beyond
            the script).
        verdicts: The scripted verdicts, as `Verdict` objects.

    Raises:
        ValueError: A string that is not `pass` or `fail[: feedback]`.
        TypeError: A verdict of another type.
    """

    def __init__(self, *verdicts: Verdict | bool | str, name: str = "fake_judge") -> None:
        self.name = name
        self.verdicts = tuple(_as_verdict(v, name) for v in verdicts)
        self.requests: list[EvaluationRequest] = []
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        """How many scripted verdicts have not been returned yet."""
        with self._lock:
            return max(0, len(self.verdicts) - len(self.requests))

    def evaluate(self, request: EvaluationRequest) -> Verdict:
        """Record the request and return the next scripted verdict.

        Args:
            request: What to judge.

        Returns:
            The next scripted verdict.

        Raises:
            AssertionError: Every scripted verdict has been returned already.
        """
        with self._lock:
            self.requests.append(request)
            asked = len(self.requests)
        if asked > len(self.verdicts):
            raise AssertionError(
                f"fake judge {self.name!r} was asked for verdict #{asked} but only "
                f"{len(self.verdicts)} were scripted; script more verdicts, or find out why "
                f"the code under test judges more often than expected "
                f"(question: {request.question[:60]!r}, answer: {request.answer[:60]!r})"
            )
        return self.verdicts[asked - 1]

    async def aevaluate(self, request: EvaluationRequest) -> Verdict:
        """Record the request and return the next scripted verdict, as a coroutine.

        Args:
            request: What to judge.

        Returns:
            The next scripted verdict.

        Raises:
            AssertionError: Every scripted verdict has been returned already.
        """
        return self.evaluate(request)

    def __repr__(self) -> str:
        return f"<FakeJudge {self.name} {len(self.requests)}/{len(self.verdicts)} used>"
