"""Money in a run: the prices it is given, each case's cost, the run's spend and its figures.

`refinekit eval --prices` / `run(prices=...)` price each case's model calls (answer, judges
inside the answer function, the run's judge) from their usage per model; `--max-cost` stops
claiming cases before the run's spend would go over it (each claim reserves its case's
expected cost in the store: `_claims.Claims.claim_within`). Prices are not part of a run's
fingerprint: a resumed run may be priced differently, and the run's options say which prices
its last session used.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._core.errors import UsageProblem
from .._core.jsonload import loads
from .._core.objects import load_object
from .._core.types import Usage
from .._engine.prices import Prices
from ._store import CaseRecord

__all__ = ["ROLES", "case_cost", "load_prices", "money", "price_note"]

ROLES = ("answer", "answer_judge", "judge", "extra")
"""The keys of a priced case's `cost`: `extra` (the answer calls after the first: retries and
corrections) is part of `answer`, shown apart."""

PricesLike = Prices | Mapping[str, Any] | str | os.PathLike[str]
"""What `prices=` takes: a `Prices`, a mapping like the JSON file, the file, or `module:name`."""


def _from_mapping(data: Mapping[str, Any], where: str) -> Prices:
    table = dict(data)
    default = table.pop("default", None)
    batch = table.pop("batch_share", None)  # a share, or {model: share}
    try:
        return Prices(
            {k: tuple(v) if isinstance(v, list) else v for k, v in table.items()},
            default=tuple(default) if isinstance(default, list) else default,
            batch_share=batch,
        )
    except (TypeError, ValueError) as e:
        raise UsageProblem(f"{where}: {e}") from None


def load_prices(spec: PricesLike | None) -> Prices | None:
    """The prices a `prices=` / `--prices` argument means; a usage problem says what to fix.

    Args:
        spec: A `refinekit.Prices`; a mapping `{model: [input, output], "default": [...]}` of
            prices per million tokens; a JSON file of that mapping (a path ending `.json`, or
            any existing file); or `module:name` of a `refinekit.Prices` object.

    Raises:
        UsageProblem: The file cannot be read or is not such a mapping, a price is not a pair
            of numbers >= 0, or `module:name` does not name a `refinekit.Prices`.
    """
    if spec is None or isinstance(spec, Prices):
        return spec
    if isinstance(spec, Mapping):
        return _from_mapping(spec, "prices")
    if not isinstance(spec, (str, os.PathLike)):
        raise UsageProblem(
            "prices must be a refinekit.Prices, a mapping {model: (input, output)} per million "
            f"tokens, a JSON file of one, or module:name of a Prices; not {type(spec).__name__}"
        )
    text = os.fspath(spec)
    path = Path(text)
    if path.suffix.lower() == ".json" or path.is_file() or ":" not in text:
        return _prices_file(path)
    return _prices_object(text)


def _prices_file(path: Path) -> Prices:
    where = f"--prices {path}"
    if path.is_dir():
        raise UsageProblem(f"{where}: is a folder; give a JSON file of prices") from None
    try:
        data = loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageProblem(
            f"{where}: no such file (give a JSON file of prices, or module:name of a "
            "refinekit.Prices)"
        ) from None
    except OSError as e:
        raise UsageProblem(f"{where}: cannot read it: {e.strerror or e}") from None
    except ValueError as e:  # not UTF-8, not JSON, nested too deep, a number of 4300 digits
        raise UsageProblem(
            f'{where}: not JSON ({e}); write {{"gpt-4.1-mini": [0.40, 1.60], "default": '
            "[1.0, 4.0]} (input and output prices per million tokens)"
        ) from None
    if not isinstance(data, dict) or not data:
        raise UsageProblem(
            f'{where}: must be a JSON object of prices, e.g. {{"gpt-4.1-mini": [0.40, 1.60]}} '
            '(input and output per million tokens; an optional "default": [input, output])'
        )
    return _from_mapping(data, where)


def _prices_object(spec: str) -> Prices:
    value = load_object(spec, "--prices")
    if not isinstance(value, Prices):
        raise UsageProblem(
            f"--prices {spec}: names a {type(value).__name__}, not a refinekit.Prices "
            "(or give a JSON file of prices)"
        )
    return value


def price_note(prices: Prices | None) -> Any:
    """The prices as a run's options keep them (JSON-ready): the table, or the callable's name."""
    if prices is None:
        return None
    state = prices.__getstate__()
    table, function, default = state[:3]
    if function is not None:
        named = {"function": getattr(function, "__qualname__", repr(function))}
        return named | ({"batch_share": state[3]} if state[3] is not None else {})
    note: dict[str, Any] = {model: list(pair) for model, pair in sorted(table.items())}
    if default is not None:
        note["default"] = list(default)
    if len(state) > 3 and state[3] is not None:
        note["batch_share"] = state[3]
    return note


def _priced(
    per_model: Mapping[tuple[bool, str | None], Usage], prices: Prices, judge: bool
) -> float:
    return sum(
        prices.cost(model, usage.prompt_tokens, usage.completion_tokens)
        for (is_judge, model), usage in per_model.items()
        if is_judge == judge
    )


def case_cost(
    answer_models: Mapping[tuple[bool, str | None], Usage],
    first: tuple[str | None, Usage] | None,
    judge_models: Mapping[tuple[bool, str | None], Usage],
    prices: Prices,
) -> dict[str, float]:
    """A case's cost: its answer job's calls, priced by model, and the run judge's calls.

    Args:
        answer_models: The answer job's usage per (judge?, model).
        first: The model and usage of the answer job's first answer call.
        judge_models: The run judge's job's usage per (judge?, model); only judge calls count.
        prices: The prices.

    Raises:
        MissingPrice: A model called has no price.
    """
    answer = _priced(answer_models, prices, judge=False)
    first_cost = 0.0 if first is None else prices.cost(first[0], *_tokens(first[1]))
    return {
        "answer": answer,
        "answer_judge": _priced(answer_models, prices, judge=True),
        "judge": _priced(judge_models, prices, judge=True),
        "extra": max(0.0, answer - first_cost),
    }


def _tokens(usage: Usage) -> tuple[int, int]:
    return usage.prompt_tokens, usage.completion_tokens


def added(old: Mapping[str, float], new: Mapping[str, float]) -> dict[str, float]:
    """Two costs of one case added (a case run again: both were paid for)."""
    if not old:
        return dict(new)
    if not new:
        return dict(old)
    return {k: old.get(k, 0.0) + new.get(k, 0.0) for k in ROLES}


def total(cost: Mapping[str, float]) -> float:
    """A case's cost in all: its answer calls, the judges inside them and the run's judge."""
    return cost.get("answer", 0.0) + cost.get("answer_judge", 0.0) + cost.get("judge", 0.0)


def money(cases: Sequence[CaseRecord]) -> dict[str, Any] | None:
    """A run's money figures, over its priced cases; None when no case was priced.

    `total`, `per_case` (the mean over the priced cases), `answer` (the answer calls and the
    judges inside the function), `judge` (the run's judge), `extra` (retries and corrections,
    part of `answer`), `per_pass` (`total` over the priced cases that passed; None when none
    passed), `priced` (cases with a cost) and `unpriced` (cases stored without one, by a
    session without prices).
    """
    priced = [c.cost for c in cases if c.cost]
    passed = sum(c.outcome == "passed" for c in cases if c.cost)
    if not priced:
        return None
    answer = sum(c.get("answer", 0.0) + c.get("answer_judge", 0.0) for c in priced)
    judge = sum(c.get("judge", 0.0) for c in priced)
    return {
        "total": answer + judge,
        "per_case": (answer + judge) / len(priced),
        "answer": answer,
        "judge": judge,
        "extra": sum(c.get("extra", 0.0) for c in priced),
        "per_pass": (answer + judge) / passed if passed else None,
        "priced": len(priced),
        "unpriced": len(cases) - len(priced),
    }
