"""Pairwise comparison, asked in both orders so position bias cannot decide."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from .._core.errors import JudgeReplyError
from .._core.types import ContextDocument, EvaluationRequest, Verdict
from .._engine.flow import Flow, Gather, run_async, run_sync
from .._engine.policy import JudgeErrorPolicy
from .._engine.prompts import DATA_RULE, context_text, delimit
from .._engine.reserve import Tickets, judge_calls
from ._base import Judge, first_error, first_word
from ._cache import cached
from ._calls import Complete, reply_text_of
from ._client import JudgeModel

Winner = Literal["a", "b", "tie"]

PAIRWISE_TASK = (
    "Your task is to compare two answers to the question, given the context. Decide which "
    "answer is better: more correct, better supported by the context, more complete. Reply with "
    "one word: A if the first answer is better, B if the second is, or TIE if neither is."
)


class Pairwise:
    """Compare two answers with a judge model; see `pairwise()`."""

    def __init__(self, judge_model: JudgeModel) -> None:
        if not isinstance(judge_model, JudgeModel):
            raise TypeError(
                f"pairwise() takes a refinekit.judges.JudgeModel, got {type(judge_model).__name__}"
            )
        self.judge_model = judge_model

    def _messages(
        self, request: EvaluationRequest, first: str, second: str
    ) -> list[dict[str, Any]]:
        content = "\n\n".join(
            [
                PAIRWISE_TASK,
                delimit("question", request.question),
                delimit("context", context_text(request)),
                delimit("answer_a", first),
                delimit("answer_b", second),
            ]
        )
        return [{"role": "system", "content": DATA_RULE}, {"role": "user", "content": content}]

    def _vote(self, completion: Any) -> Winner:
        text = reply_text_of(self.judge_model, completion)
        word = first_word(text)
        if word in ("a", "b", "tie"):
            return word  # type: ignore[return-value]
        raise JudgeReplyError(
            f"judge model {self.judge_model.model!r} did not answer A, B or TIE: {text[:200]!r}",
            model=self.judge_model.model,
            reply=text[:200],
        )

    def _orders(
        self, question: str, answer_a: str, answer_b: str, context: Iterable[Any]
    ) -> Flow[tuple[Winner, Winner]]:
        """The votes of both orders, each as a winner between `answer_a` and `answer_b`."""
        request = EvaluationRequest(
            question=question,
            answer="",
            context=tuple(ContextDocument.coerce(d) for d in _documents(context)),
        )
        asks = [
            self.judge_model.request(messages, 4)
            for messages in (
                self._messages(request, answer_a, answer_b),
                self._messages(request, answer_b, answer_a),
            )
        ]
        # Both orders reserved together: one that does not fit is not sent.
        with Tickets(judge_calls(self.judge_model.model, asks)) as tickets:
            completions = yield Gather(
                [
                    cached("pairwise", Complete(self.judge_model, ask, ticket), self._vote)
                    for ask, ticket in zip(asks, tickets.held, strict=True)
                ]
            )
        error = first_error(completions)
        if error is not None:
            raise error
        first = self._vote(completions[0])
        swapped = self._vote(completions[1])
        second: Winner = {"a": "b", "b": "a", "tie": "tie"}[swapped]  # type: ignore[assignment]
        return first, second

    def _flow(
        self, question: str, answer_a: str, answer_b: str, context: Iterable[Any]
    ) -> Flow[Winner]:
        first, second = yield from self._orders(question, answer_a, answer_b, context)
        return first if first == second else "tie"

    def against(
        self,
        reference: str | Callable[[EvaluationRequest], str],
        *,
        judge_error_policy: JudgeErrorPolicy | None = None,
    ) -> Judge:
        """An evaluator: the answer passes when it is not worse than a reference answer.

        Each answer is compared with its reference in both orders (two calls); it passes when
        the comparison is not "b" (the reference better): it wins, or ties, or the two orders
        disagree (a tie, as `compare` says). The verdict's metadata says what each order
        voted and whether they agreed (`position_consistent`): `refinekit calibrate` reports
        the share of items whose verdict swapping the order changed.

        Args:
            reference: The name of the reference column of the golden or labelled row (read
                from `request.metadata["row"]`, which `refinekit eval` and `calibrate` fill),
                or a function of the request returning the reference text.
            judge_error_policy: None (the caller's policy decides), "fail_open" or
                "fail_closed".

        Returns:
            The evaluator (score 1 for a win, 0.5 for a tie, 0 for a loss).

        Raises:
            TypeError: `reference` is neither a column name nor a callable.
        """
        return _Versus(self, reference, judge_error_policy)

    def compare(
        self, question: str, answer_a: str, answer_b: str, context: Iterable[Any] = ()
    ) -> Winner:
        """Which answer is better: "a", "b", or "tie" when the two orders disagree.

        Args:
            question: The question both answers answer.
            answer_a: The first answer.
            answer_b: The second answer.
            context: The context documents (str, mapping with `text`, or `ContextDocument`).

        Returns:
            The winner.

        Raises:
            JudgeUnavailable: The judge could not be reached (after the client's retries).
            JudgeMisconfigured: The endpoint refused the request (400/401/403/404/422).
            JudgeReplyError: A reply was not A, B or TIE.
        """
        return run_sync(self._flow(question, answer_a, answer_b, context))

    async def acompare(
        self, question: str, answer_a: str, answer_b: str, context: Iterable[Any] = ()
    ) -> Winner:
        """`compare`, without blocking the event loop (both orders are asked concurrently)."""
        return await run_async(self._flow(question, answer_a, answer_b, context))


class _Versus(Judge):
    """The answer against a reference answer, by a pairwise judge (`Pairwise.against`)."""

    name = "pairwise"
    expected_calls = 2.0

    def __init__(
        self,
        pairwise: Pairwise,
        reference: str | Callable[[EvaluationRequest], str],
        policy: JudgeErrorPolicy | None,
    ) -> None:
        super().__init__(pairwise.judge_model, policy)
        if not (isinstance(reference, str) and reference) and not callable(reference):
            raise TypeError(
                "against() takes the reference column's name or a function of the request, "
                f"got {reference!r}"
            )
        self.pairwise = pairwise
        self.reference = reference

    def _reference(self, request: EvaluationRequest) -> str | None:
        if callable(self.reference):
            return self.reference(request)
        row = request.metadata.get("row")
        value = row.get(self.reference) if isinstance(row, Mapping) else None
        return None if value is None else str(value)

    def _judge(self, request: EvaluationRequest) -> Flow[Verdict]:
        reference = self._reference(request)
        if reference is None or not reference.strip():
            return Verdict.inconclusive(
                "NO_REFERENCE", judge=self.name, reference=str(self.reference)
            )
        first, second = yield from self.pairwise._orders(
            request.question, request.answer, reference, request.context
        )
        winner: Winner = first if first == second else "tie"
        passed = winner != "b"
        return Verdict(
            passed=passed,
            score={"a": 1.0, "tie": 0.5, "b": 0.0}[winner],
            feedback=""
            if passed
            else "The reference answer is better: answer as correctly and completely, from "
            "the context.",
            metadata={
                "judge": self.name,
                "orders": [first, second],
                "position_consistent": first == second,
                "winner": winner,
            },
        )


def _documents(context: Iterable[Any]) -> list[Any]:
    if isinstance(context, (str, ContextDocument, Mapping)):
        return [context]
    return list(context)


def pairwise(judge_model: JudgeModel) -> Pairwise:
    """A pairwise judge: `pairwise(jm).compare(question, answer_a, answer_b, context=())`.

    It asks the judge twice, concurrently, with the answers in both orders, and reports a tie
    when the two verdicts disagree, so a judge's preference for the first (or second) position
    cannot decide the outcome.

    Args:
        judge_model: The judge.

    Returns:
        The pairwise judge.
    """
    return Pairwise(judge_model)
