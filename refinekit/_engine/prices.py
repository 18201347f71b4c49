"""What a budget is: the prices that make a cost (`Prices`) and the limits of a job (`Budget`).

Values only, checked when made; how a job is held to them is `budget`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .._core.errors import MissingPrice
from .._core.numbers import FLOAT_MAX, is_number, is_real, shown

__all__ = ["Budget", "PriceFunction", "Prices"]


PriceFunction = Callable[[str | None, int, int], float]
"""A price callable: `(model, prompt_tokens, completion_tokens) -> cost` (model None: unnamed)."""

_DATED = re.compile(r"[-@](\d{4}-\d{2}-\d{2}|\d{8})$")
"""A dated model snapshot's suffix: `gpt-4.1-mini-2025-04-14`, `claude-3-5-haiku-20241022`."""


def _per_million(name: str, value: object) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(
            f"Prices: the {name} must be a number (per million tokens), not {type(value).__name__}"
        )
    if not is_real(value) or value < 0:
        raise ValueError(
            f"Prices: the {name} must be a finite number >= 0 (at most {FLOAT_MAX:.3g}) per "
            f"million tokens, e.g. 0.40; got {shown(value)}"
        )
    return float(value)


def _pair(model: str, value: object) -> tuple[float, float]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        shown = type(value).__name__ if not isinstance(value, (tuple, list)) else len(value)
        raise TypeError(
            f"Prices: the price of {model!r} must be a pair (input, output) of prices per "
            f"million tokens, e.g. (0.40, 1.60); got {shown!r}"
        )
    return (
        _per_million(f"input price of {model!r}", value[0]),
        _per_million(f"output price of {model!r}", value[1]),
    )


class Prices:
    """Prices you give, to turn token usage into cost (refinekit ships no price table).

    Either a mapping of model name to `(input, output)` prices per million tokens, or a
    callable `(model, prompt_tokens, completion_tokens) -> cost`:

        Prices({"gpt-4.1-mini": (0.40, 1.60)})
        Prices(lambda model, prompt, completion: (prompt * 0.4 + completion * 1.6) / 1e6)

    A reply names the model that answered it, often a dated snapshot: a name is looked up as
    it is, then without a date suffix (`gpt-4.1-mini-2025-04-14` is priced as
    `gpt-4.1-mini`, `claude-3-5-haiku-20241022` as `claude-3-5-haiku`). A model found neither
    way is priced at `default` when given; without a default, pricing it raises
    `MissingPrice`, naming the model: an unpriced call never counts as free.

    A call made through a provider's batch API (`refinekit eval --batch`) costs a share of
    the list price: the provider's published batch discount (half, for OpenAI and Anthropic),
    unless `batch_share` says otherwise.

    Args:
        prices: The mapping (copied: changing yours later changes nothing here), or the
            callable. The callable is called with model None for a call that named no model.
        default: `(input, output)` per million tokens for a model the mapping does not name.
            Only with a mapping.
        batch_share: The share of the list price a batched call costs (0 to 1): one
            number for every model, or a mapping of model name to share (a model it does not
            name gets its provider's share; dated snapshots are looked up as for prices).
            None: the provider's.

    Raises:
        TypeError: `prices` is neither a mapping nor callable; a model name is not a non-empty
            str; a price is not a pair of numbers; `default` with a callable; a batch share
            is not a number.
        ValueError: A price is negative, infinite or NaN; a batch share is not from 0 to 1.
    """

    __slots__ = ("_batch", "_default", "_function", "_table")

    def __init__(
        self,
        prices: Mapping[str, tuple[float, float]] | PriceFunction,
        *,
        default: tuple[float, float] | None = None,
        batch_share: float | Mapping[str, float] | None = None,
    ) -> None:
        self._table: dict[str, tuple[float, float]] | None = None
        self._function: PriceFunction | None = None
        self._batch = _shares(batch_share)
        if isinstance(prices, Mapping):
            table = {}
            for model, value in prices.items():
                if not isinstance(model, str) or not model:
                    raise TypeError(f"Prices: a model name must be a non-empty str, got {model!r}")
                table[model] = _pair(model, value)
            self._table = table
        elif callable(prices):
            if default is not None:
                raise TypeError(
                    "Prices: default= is for a mapping of prices; a price callable prices "
                    "every model itself"
                )
            self._function = prices
        else:
            raise TypeError(
                "Prices takes a mapping {model: (input, output)} of prices per million tokens "
                f"or a callable (model, prompt_tokens, completion_tokens) -> cost, not "
                f"{type(prices).__name__}"
            )
        self._default = None if default is None else _pair("default", default)

    def cost(self, model: str | None, prompt_tokens: int, completion_tokens: int) -> float:
        """What `prompt_tokens` in and `completion_tokens` out cost on `model`.

        Args:
            model: The model's name as the reply (or `record_usage(model=...)`) gave it; None
                when the call named none.
            prompt_tokens: Input tokens.
            completion_tokens: Output tokens.

        Returns:
            The cost, in the currency of the prices.

        Raises:
            MissingPrice: No price for `model` and no default.
            TypeError: The price callable returned something that is not a number.
            ValueError: The price callable returned a negative, infinite or NaN cost.
        """
        if self._function is not None:
            value = self._function(model, prompt_tokens, completion_tokens)
            if not is_number(value):
                raise TypeError(
                    f"Prices: the price callable returned {type(value).__name__} for model "
                    f"{model!r}; it must return a number"
                )
            if not is_real(value) or value < 0:
                raise ValueError(
                    f"Prices: the price callable returned {shown(value)} for model {model!r}; "
                    f"it must return a finite number >= 0 (at most {FLOAT_MAX:.3g})"
                )
            return float(value)
        pair = self.price_of(model)
        return (prompt_tokens * pair[0] + completion_tokens * pair[1]) / 1_000_000

    def price_of(self, model: str | None) -> tuple[float, float]:
        """The `(input, output)` prices per million tokens used for `model` (a mapping only).

        Raises:
            MissingPrice: No price for `model` and no default.
            TypeError: These prices are a callable.
        """
        if self._table is None:
            raise TypeError("Prices: a price callable has no per-model table")
        if model is not None:
            found = self._table.get(model)
            if found is None:
                undated = _DATED.sub("", model)
                found = self._table.get(undated)
            if found is not None:
                return found
        if self._default is not None:
            return self._default
        if model is None:
            raise MissingPrice(
                "a model call named no model, so it cannot be priced: pass model= to "
                "refinekit.record_usage(), or give Prices(..., default=(input, output))",
                model=None,
            )
        raise MissingPrice(
            f"no price for model {model!r}: add it to the prices, e.g. "
            f"Prices({{{model!r}: (input, output)}}) per million tokens, or give "
            "Prices(..., default=(input, output))",
            model=model,
        )

    def batch_share(self, model: str | None, provider_share: float) -> float:
        """The share of the list price a batched call of `model` costs.

        This object's `batch_share` for it when given, else `provider_share` (the
        provider's published batch discount).
        """
        batch = self._batch
        if batch is None:
            return provider_share
        if isinstance(batch, float):
            return batch
        if model is not None:
            found = batch.get(model)
            if found is None:
                found = batch.get(_DATED.sub("", model))
            if found is not None:
                return found
        return provider_share

    def _key(self) -> tuple[Any, ...]:
        table = None if self._table is None else tuple(sorted(self._table.items()))
        batch = self._batch
        shares = tuple(sorted(batch.items())) if isinstance(batch, dict) else batch
        return (table, self._function, self._default, shares)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Prices):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __getstate__(self) -> tuple[Any, ...]:
        return (self._table, self._function, self._default, self._batch)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self._table, self._function, self._default = state[:3]
        self._batch = state[3] if len(state) > 3 else None

    def __repr__(self) -> str:
        batch = "" if self._batch is None else f", batch_share={self._batch!r}"
        if self._function is not None:
            return f"Prices({self._function!r}{batch})"
        extra = "" if self._default is None else f", default={self._default!r}"
        return f"Prices({self._table!r}{extra}{batch})"


def _share(name: str, value: object) -> float:
    if not is_number(value) or isinstance(value, bool):
        raise TypeError(
            f"Prices: batch_share{name} must be a number from 0 to 1, not {type(value).__name__}"
        )
    assert isinstance(value, (int, float))
    if not is_real(value) or not 0 <= value <= 1:
        raise ValueError(
            f"Prices: batch_share{name} must be from 0 to 1 (0.5: half the list price), "
            f"got {shown(value)}"
        )
    return float(value)


def _shares(value: float | Mapping[str, float] | None) -> float | dict[str, float] | None:
    """`batch_share=` checked: None, one share, or a share per model."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        shares = {}
        for model, share in value.items():
            if not isinstance(model, str) or not model:
                raise TypeError(f"Prices: a model name must be a non-empty str, got {model!r}")
            shares[model] = _share(f"[{model!r}]", share)
        return shares
    return _share("", value)


def _limit(name: str, value: object, *, integer: bool) -> None:
    if value is None:
        return
    if not is_number(value) or (integer and not isinstance(value, int)):
        kind = "an int" if integer else "a number"
        raise TypeError(f"Budget: {name} must be {kind} or None, not {type(value).__name__}")
    assert isinstance(value, (int, float))
    if not is_real(value) or value <= 0:
        raise ValueError(
            f"Budget: {name} must be above 0 and at most {FLOAT_MAX:.3g} (or None for no "
            f"limit), got {shown(value)}"
        )


@dataclass(frozen=True)
class Budget:
    """Limits on what one job may spend on model calls: tokens, cost and calls.

    Give it to any decorator (`budget=`) or to `refinekit.job(budget=...)`. It counts the
    whole job: the answer calls, corrections, revisions and judge calls, answer and judge
    together. Nested decorators share the job's budget; an inner decorator's `budget=` can
    only tighten it, for the time of its own call. See docs/budgets.md.

    Attributes:
        max_tokens: Most tokens (prompt plus completion), or None.
        max_cost: Most cost, in the currency of `prices`, or None. Needs `prices`.
        max_calls: Most model calls, or None.
        prices: The prices to compute cost with (also without `max_cost`: then the job,
            its outcomes, events and errors carry a cost, and nothing is limited by it).

    Raises:
        TypeError: A limit of the wrong type; `prices` not a `refinekit.Prices`.
        ValueError: A limit that is not above 0; `max_cost` without `prices`; no limit and no
            prices at all.
    """

    max_tokens: int | None = None
    max_cost: float | None = None
    max_calls: int | None = None
    prices: Prices | None = None

    def __post_init__(self) -> None:
        _limit("max_tokens", self.max_tokens, integer=True)
        _limit("max_cost", self.max_cost, integer=False)
        _limit("max_calls", self.max_calls, integer=True)
        if self.prices is not None and not isinstance(self.prices, Prices):
            raise TypeError(
                "Budget: prices must be a refinekit.Prices, e.g. "
                f"Prices({{'gpt-4.1-mini': (0.40, 1.60)}}), not {type(self.prices).__name__}"
            )
        if self.max_cost is not None and self.prices is None:
            raise ValueError(
                "Budget: max_cost needs prices to compute a cost with: "
                "Budget(max_cost=..., prices=refinekit.Prices({'model': (input, output)}))"
            )
        if (
            self.max_tokens is None
            and self.max_cost is None
            and self.max_calls is None
            and self.prices is None
        ):
            raise ValueError(
                "Budget: give at least one of max_tokens, max_cost, max_calls (or prices, to "
                "count cost without a limit)"
            )

    def tightened(self, inner: Budget) -> Budget:
        """This budget with `inner`'s limits where they are lower (the job's prices first)."""

        def low(a: Any, b: Any) -> Any:
            return b if a is None else a if b is None else min(a, b)

        return Budget(
            max_tokens=low(self.max_tokens, inner.max_tokens),
            max_cost=low(self.max_cost, inner.max_cost),
            max_calls=low(self.max_calls, inner.max_calls),
            prices=self.prices if self.prices is not None else inner.prices,
        )
