"""A judge cascade: the cheap judge's verdict kept when it is sure enough, else the strong one.

Levels, cheapest first: a free rule check (a number the context does not hold is a sure
fail), a cheap model judge, a strong model judge. Thresholds fitted on labelled items make the
cascade agree with people at least 90% of the time, with 90% probability; an answer no level
is sure enough about gets an inconclusive verdict rather than a guess.

By default it runs on refinekit.testing.ScriptedOpenAI, a real OpenAI-compatible HTTP server on
127.0.0.1 whose replies are scripted (with token probabilities): it shows the wiring, not a
model's quality. To run it on a real endpoint, set OPENAI_BASE_URL and REFINEKIT_JUDGE_MODEL
(and OPENAI_API_KEY if the endpoint needs a key); both model levels then use that model (in
production the strong level is a bigger one, e.g. `judges.JudgeModel(client, "gpt-4.1")`):

    OPENAI_BASE_URL=http://localhost:11434/v1 REFINEKIT_JUDGE_MODEL=qwen2.5 \
        python examples/judge_cascade.py
"""

from __future__ import annotations

import random
from contextlib import ExitStack

from _endpoint import judge_model  # scripted server, or the endpoint you configured

from refinekit import ContextDocument, EvaluationRequest, checks, judges
from refinekit.eval import fit_cascade
from refinekit.testing import Reply

POLICY = ContextDocument(
    text="An unused order may be refunded within seven days of delivery.",
    source="policies/refunds.md",
)
QUESTION = "Can I get a refund for my order?"
ANSWERS = [
    "Yes, within 30 days of delivery.",  # a number the policy does not hold
    "Yes, if the order is unused and you ask within seven days of delivery.",
    "Yes, you can get a refund within seven days.",  # drops a condition
]
SCRIPTED = [  # the scripted judge's replies, with their token probabilities, in order
    Reply.text("Yes", {"Yes": 0.98, "No": 0.02}),  # cheap, answer 2: sure
    Reply.text("Yes", {"Yes": 0.75, "No": 0.25}),  # cheap, answer 3: not sure enough
    Reply.text("No", {"Yes": 0.04, "No": 0.96}),  # strong, answer 3
]


def calibration_records(n: int = 400) -> tuple[list[list], list[list], list[bool]]:
    """What a calibration run records on `n` labelled items: each level's verdict and
    confidence (`metadata["cascade"]["levels"]` under `every_member()`), and people's label.

    Made up here (a seeded simulation): the check fails a third of the answers people fail,
    the cheap judge is right as often as it says, the strong one is surer and as honest.
    """
    rng = random.Random(7)
    passed: list[list] = []
    confidence: list[list] = []
    labels: list[bool] = []
    for _ in range(n):
        label = rng.random() < 0.6
        check = (False, 1.0) if not label and rng.random() < 0.3 else (True, None)
        cheap_sure = 0.5 + 0.5 * rng.random() ** 0.7
        strong_sure = 0.5 + 0.5 * rng.random() ** 0.25
        cheap = label if rng.random() < cheap_sure else not label
        strong = label if rng.random() < strong_sure else not label
        passed.append([check[0], cheap, strong])
        confidence.append([check[1], cheap_sure, strong_sure])
        labels.append(label)
    return passed, confidence, labels


def main() -> None:
    with ExitStack() as stack:
        jm = judge_model(stack, SCRIPTED)
        cheap = judges.criteria(
            jm, [judges.Criterion("supported", "Does the context support the answer?")]
        )
        strong = judges.criteria(
            jm,
            [
                judges.Criterion(
                    "keeps_conditions",
                    "Does the answer keep every condition the context puts on the refund?",
                )
            ],
        )
        gate = judges.cascade(
            ("numbers", checks.numbers_supported()), ("cheap", cheap), ("strong", strong)
        )

        # costs: what asking each level costs (here: the check is free, the strong judge is
        # ten times the cheap one); the fit keeps the cascade whose verdicts cost least
        fit = fit_cascade(*calibration_records(), target=0.9, risk=0.1, costs=[0, 1, 10])
        thresholds = ", ".join("-" if t is None else f"{t:.2f}" for t in fit.thresholds)
        shares = ", ".join(f"{s:.2f}" for s in fit.shares)
        print(
            f"fitted on {fit.n} labelled items: thresholds {thresholds}; decided per level and "
            f"abstained: {shares}; agreement {fit.observed:.3f} (guaranteed >= {fit.target} "
            f"with probability {1 - fit.risk:.1f})"
        )
        gate = gate.with_fit(fit)

        for answer in ANSWERS:
            request = EvaluationRequest(question=QUESTION, answer=answer, context=(POLICY,))
            verdict = gate.evaluate(request)
            record = verdict.metadata["cascade"]
            asked = [level["name"] for level in record["levels"] if level["asked"]]
            print(f"  {answer!r}")
            if record["level"] is None:  # no level was sure enough
                print(f"    inconclusive ({verdict.reason}); asked: {', '.join(asked)}")
                continue
            outcome = "passed" if verdict.passed else "failed"
            print(
                f"    {outcome} by {gate.level_names[record['level']]} "
                f"(confidence {record['confidence']:.2f}); asked: {', '.join(asked)}"
            )


if __name__ == "__main__":
    main()
