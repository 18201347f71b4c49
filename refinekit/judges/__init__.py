"""Model-backed judges over any OpenAI-compatible endpoint.

Each judge takes a `JudgeModel` (an `openai` client, sync or async, plus the judge's model
name and settings) and is an evaluator: use it as `evaluator=` of `@retry_on_low_quality`,
inside `all_of(...)` after the free rule checks, or call `evaluate` / `aevaluate` yourself::

    from openai import OpenAI
    from refinekit import judges, retry_on_low_quality

    jm = judges.JudgeModel(OpenAI(), "gpt-4o-mini")
    grounded = judges.criteria(jm, [
        judges.Criterion("keeps_conditions", "Does the answer keep every condition the "
                         "context puts on the refund?", when_false="Keep the conditions."),
    ])

Every prompt puts the question, the context and the answer inside delimiters and tells the
judge that text inside them is data, never instructions. Judge calls' tokens are counted in
the job's `judge_usage`, apart from the answering model's `usage`.

`panel([...], rule="majority")` makes one verdict of several evaluators' votes (rule checks,
model judges, other panels), cheapest first, stopping once the outcome cannot change:
see docs/panels.md.

`cascade(cheap, strong)` keeps the cheap judge's verdict when it is sure enough and asks the
strong one otherwise; thresholds fitted on labelled items (`refinekit.eval.fit_cascade`)
guarantee its agreement with people: see docs/panels.md, "Cascades".

`JudgeModel(..., cache=MemoryCache())` (or `SQLiteCache(path)`) answers a request asked
before from the cache, with no model call: see docs/judge_cache.md.
"""

from __future__ import annotations

from .._core.package import rehome
from ._base import Judge, JudgeErrorPolicy
from ._cache import cache_salt, use_cache
from ._cache_backends import JudgeCache, MemoryCache, PostgresCache, SQLiteCache
from ._cascade import Cascade, cascade
from ._client import JudgeModel
from ._confidence import Sampled, confidence_of, sampled
from ._criteria import Criterion, criteria
from ._pairwise import Pairwise, Winner, pairwise
from ._panel import Panel, PanelRule, panel
from ._rating import rating
from ._yesno import fact_check, relevancy

__all__ = [
    "Cascade",
    "Criterion",
    "Judge",
    "JudgeCache",
    "JudgeErrorPolicy",
    "JudgeModel",
    "MemoryCache",
    "Pairwise",
    "Panel",
    "PanelRule",
    "PostgresCache",
    "SQLiteCache",
    "Winner",
    "Sampled",
    "cache_salt",
    "cascade",
    "confidence_of",
    "use_cache",
    "criteria",
    "fact_check",
    "pairwise",
    "panel",
    "rating",
    "relevancy",
    "sampled",
]

rehome(globals(), __all__, __name__)  # shown as `refinekit.judges.<name>`
