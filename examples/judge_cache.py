"""The judge cache: a judgement asked again is answered from the cache, with no model call.

Three answers are judged for relevancy twice with an `SQLiteCache` on the judge model: the
first pass pays for three judge calls, the second makes none and gets the same verdicts.
A changed answer misses (one call); `cache_salt("repeat=2")` keys a deliberate second opinion
apart (one call). The cache file would serve the next run of this script too; here it lives
in a temporary folder.

By default it runs on refinekit.testing.ScriptedOpenAI, a real OpenAI-compatible HTTP server on
127.0.0.1 whose replies are scripted: it shows the wiring, not a model's quality. To run it on a
real endpoint, set OPENAI_BASE_URL and REFINEKIT_JUDGE_MODEL (and OPENAI_API_KEY if the endpoint
needs a key):

    OPENAI_BASE_URL=http://localhost:11434/v1 REFINEKIT_JUDGE_MODEL=qwen2.5 \
        python examples/judge_cache.py
"""

from __future__ import annotations

import tempfile
from contextlib import ExitStack
from pathlib import Path

from _endpoint import judge_model  # scripted server, or the endpoint you configured

import refinekit
from refinekit import ContextDocument, EvaluationRequest, Event, Verdict, judges

POLICY = ContextDocument(
    text="An unused order may be refunded within seven days of delivery.",
    source="policies/refunds.md",
)
QUESTION = "Can I get a refund for my order?"
ANSWERS = [
    "Yes, if the order is unused and you ask within seven days of delivery.",
    "Our headphones come in black and in white.",
    "Yes: unused orders can be refunded for a week after delivery.",
]
CHANGED = "Yes, any order can be refunded at any time."
# the scripted judge's replies, one per model call: 3 on the first pass, none on the second,
# 1 for the changed answer, 1 for the salted repeat
SCRIPTED = ["Yes", "No", "Yes", "No", "Yes"]


def request(answer: str) -> EvaluationRequest:
    return EvaluationRequest(question=QUESTION, answer=answer, context=(POLICY,))


def judge_all(judge: judges.Judge, answers: list[str]) -> tuple[list[Verdict], refinekit.Usage]:
    """Every answer's verdict, and what the judge calls cost (the job's judge usage)."""
    with refinekit.job() as job:
        verdicts = [judge.evaluate(request(answer)) for answer in answers]
    return verdicts, job.judge_usage


def main() -> None:
    seen: list[Event] = []
    with ExitStack() as stack, refinekit.subscribe(seen.append):
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        cache = stack.enter_context(judges.SQLiteCache(folder / "judge-cache.sqlite"))
        jm = judge_model(stack, SCRIPTED, cache=cache)  # temperature 0: cached
        relevancy = judges.relevancy(jm)

        first, cost = judge_all(relevancy, ANSWERS)
        print(
            f"pass 1: {len(first)} judgements, {cost.model_calls} judge calls, "
            f"{cost.total_tokens} tokens"
        )
        print("  " + ", ".join("passed" if v.passed else "failed" for v in first))
        again, cost = judge_all(relevancy, ANSWERS)
        print(
            f"pass 2: {len(again)} judgements, {cost.model_calls} judge calls, "
            f"{cost.total_tokens} tokens; same verdicts: {again == first}"
        )

        _, cost = judge_all(relevancy, [CHANGED])
        print(f"a changed answer: {cost.model_calls} judge call (a miss)")
        with judges.cache_salt("repeat=2"):  # e.g. the 2nd repeat of an eval
            _, cost = judge_all(relevancy, ANSWERS[:1])
        print(f"the first answer again under cache_salt('repeat=2'): {cost.model_calls} call")

        print(f"cache: {cache.hits} hits, {cache.misses} misses, {len(cache)} entries")
        events = [e.cache for e in seen if e.kind == "judge_cache"]
        print(f"judge_cache events: {events.count('hit')} hit, {events.count('miss')} miss")


if __name__ == "__main__":
    main()
