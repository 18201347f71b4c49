"""The scripted server's replies: what the answering model and the judge say.

Each reply is read from its request, so the run is deterministic whatever the order of the
judge's concurrent requests.
"""

from __future__ import annotations

from collections.abc import Callable

from ..._decorators.correct import CHECK_MARKER
from ...testing import RecordedRequest, Reply, ScriptedOpenAI
from ._scenarios import CRITERIA, SCRIPTED_JUDGE, SCRIPTED_MODEL

__all__ = ["script_demo", "scripted_answer", "scripted_judge"]

_DRAFTS = (
    "Yes, you can get a full refund for your order, no questions asked. [policies/refunds.md]",
    "Yes, if the order is unused: an unused order may be refunded within seven days of "
    "delivery. [policies/refunds.md]",
)
_EXTRACTIONS = (
    "Sure! The invoice number is INV-7 and the total is 12.50 EUR.",
    '{"number": "INV-7", "currency": "EUR"}',
    '{"number": "INV-7", "total_cents": 1250, "currency": "EUR"}',
)
_SCRIPTED_CHECKS: dict[str, Callable[[str], bool]] = {
    "answers_question": lambda answer: "refund" in answer.lower(),
    "keeps_conditions": lambda answer: "unused" in answer and "seven days" in answer,
}
_YES = {"YES": 0.97, "NO": 0.03}
_NO = {"NO": 0.96, "YES": 0.04}


def _texts(request: RecordedRequest) -> list[tuple[str, str]]:
    messages = (request.body or {}).get("messages") or []
    return [
        (str(m.get("role")), m["content"])
        for m in messages
        if isinstance(m, dict) and isinstance(m.get("content"), str)
    ]


def scripted_answer(request: RecordedRequest) -> str:
    """The scripted answering model: its reply depends on what the request carries.

    An extraction request gets prose at first; given a correction turn, JSON missing
    `total_cents`; given a correction saying that `total_cents` is missing, valid JSON (as a
    model acting on the correction would). A refund request gets the unconditional draft, or
    the conditional one when the judge's feedback arrived in the prompt.

    Args:
        request: The request the server received.

    Returns:
        The reply's text.
    """
    texts = _texts(request)
    if any("Extract the invoice" in content for _, content in texts):
        role, last = texts[-1]
        if role != "user" or not last.startswith(CHECK_MARKER):
            return _EXTRACTIONS[0]
        return _EXTRACTIONS[2] if '"total_cents" is missing' in last else _EXTRACTIONS[1]
    feedback = CRITERIA[1].when_false
    return _DRAFTS[1] if feedback in texts[-1][1] else _DRAFTS[0]


def scripted_judge(request: RecordedRequest) -> Reply:
    """The scripted judge: YES or NO, with logprobs, for the criterion the request asks about.

    It finds the criterion by its question and reads the answer between the `<answer>` tags,
    so the verdict does not depend on the order in which concurrent requests arrive.

    Args:
        request: The request the server received.

    Returns:
        The reply, with the probabilities of its first token.

    Raises:
        ValueError: The request asks about no criterion of the demo (the server answers 500).
    """
    prompt = _texts(request)[-1][1]
    answer = prompt.partition("<answer>\n")[2].partition("\n</answer>")[0]
    for criterion in CRITERIA:
        if isinstance(criterion.question, str) and criterion.question in prompt:
            holds = _SCRIPTED_CHECKS[criterion.name](answer)
            return Reply.text("YES", _YES) if holds else Reply.text("NO", _NO)
    raise ValueError("the request asks about no criterion of the demo")


def script_demo(
    server: ScriptedOpenAI, model: str = SCRIPTED_MODEL, judge_model: str = SCRIPTED_JUDGE
) -> None:
    """Script `server` with the demo's replies, exactly as many as the demo makes requests.

    The answering model gets 5 requests (2 refund drafts, 3 extraction replies), the judge 4
    (2 model criteria for each draft); one more request would get an HTTP 500 naming the model.

    Args:
        server: A running scripted server.
        model: The answering model's name.
        judge_model: The judge model's name.
    """
    server.script(model, [scripted_answer] * 5)
    server.script(judge_model, [scripted_judge] * 4)
