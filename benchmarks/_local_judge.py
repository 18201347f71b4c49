"""The judge `bench_local_quality.py` calibrates, importable by `refinekit calibrate --judge`.

`refinekit calibrate ... --judge _local_judge:judge` (with `benchmarks/` on `sys.path`, as it
is when the benchmark runs) imports this module, which builds a `criteria` judge with one model
criterion on the local model whose base URL and name the benchmark puts in the environment:

- `REFINEKIT_BENCH_BASE_URL`: the server's base URL, `http://127.0.0.1:<port>/v1`;
- `REFINEKIT_BENCH_MODEL`: the model name (default `smollm2-135m-instruct`).

The judge's client is an `openai.AsyncOpenAI` (calibrate judges with `aevaluate`) whose
transport counts the judge's calls and tokens into `counter`.
"""

from __future__ import annotations

import os

import openai
from _http_count import Counter, async_http_client

from refinekit import judges

__all__ = ["BASE_URL_VAR", "CRITERION", "MODEL_VAR", "counter", "judge", "make_judge"]

BASE_URL_VAR = "REFINEKIT_BENCH_BASE_URL"
MODEL_VAR = "REFINEKIT_BENCH_MODEL"
TIMEOUT_S = 300.0

CRITERION = judges.Criterion("correct", "Is the answer correct and supported by the context?")
"""The one model criterion, with the default thresholds (pass at p >= 0.8, fail at <= 0.2)."""

counter = Counter()
"""The judge's calls and tokens, counted on the wire."""


def make_judge(base_url: str, model: str) -> judges.Judge:
    """A criteria judge asking `CRITERION` of `model` at `base_url` (temperature 0, seed 42)."""
    client = openai.AsyncOpenAI(
        base_url=base_url,
        api_key="not-needed",
        max_retries=0,
        timeout=TIMEOUT_S,
        http_client=async_http_client(counter, TIMEOUT_S),
    )
    return judges.criteria(judges.JudgeModel(client, model), [CRITERION])


if BASE_URL_VAR not in os.environ:
    raise RuntimeError(
        f"{BASE_URL_VAR} is not set: this judge is built by benchmarks/bench_local_quality.py, "
        "which starts the local model and sets it"
    )

judge = make_judge(os.environ[BASE_URL_VAR], os.environ.get(MODEL_VAR, "smollm2-135m-instruct"))
