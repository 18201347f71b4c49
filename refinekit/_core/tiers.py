"""An escalation ladder's values: its tiers, the ladder, and what each tier did in a call.

`Tier` and `Escalation`; what a tier did is `refinekit._core.types.TierReport`.

Values only, checked when made; how a decorated call climbs the ladder is
`refinekit._engine.ladder`'s. This module imports nothing from the rest of refinekit but the
data model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal

from .errors import BudgetExceeded, RefinekitError, _rebuild
from .types import TierReport

__all__ = [
    "CARRY_DEFAULT",
    "MAX_TIERS",
    "Escalation",
    "EscalationLike",
    "EscalationUnaffordable",
    "ModelRefused",
    "Tier",
    "TierLike",
]

MAX_TIERS = 10
"""The most tiers a ladder may have."""

CARRY_DEFAULT = False
"""What the next tier is told by default: nothing of the tier below (it starts fresh). Chosen by
measurement on the local model, where carrying the failure cost most of the exact answers
(docs/escalation.md)."""

_TIER_LIMIT = 100  # a tier's own corrections or retries: the decorators' own limits apply


class EscalationUnaffordable(BudgetExceeded):
    """An escalation ladder stopped before a tier whose first call the budget cannot cover.

    Raised instead of moving up when the job's budget (`max_cost`, `max_tokens` or
    `max_calls`) cannot cover the next tier's first call, estimated from the tokens of the
    calls made so far priced as that tier's model (`refinekit.Prices`). The failure of the
    tier below is its `__cause__` and its `failure`.

    Attributes:
        tier: The name of the tier that was not tried.
        failure: Why the tier below was left (its `CorrectionExhausted`,
            `LowQualityAnswer`, `ModelRefused`, or the error in `on_errors`).
    """

    def __init__(
        self, message: str, *, tier: str, failure: BaseException | None, **fields: Any
    ) -> None:
        super().__init__(message, **fields)
        self.tier = tier
        self.failure = failure


class ModelRefused(RefinekitError):
    """The model declined to answer: a typed refusal.

    Raise it from a decorated function when its model refuses; refinekit raises it for a
    reply that carries a refusal (OpenAI's `message.refusal`, Anthropic's
    `stop_reason == "refusal"`) under `escalate=`. With an escalation ladder it moves the call
    to the next tier at once (no correction or retry is spent on it); without one it
    propagates.

    Args:
        refusal: The model's refusal text, as it gave it.

    Attributes:
        refusal: The refusal text.
        tiers: On the last tier of a ladder, what each tier did; empty otherwise.
    """

    def __init__(self, refusal: str = "") -> None:
        super().__init__(f"the model refused: {refusal}" if refusal else "the model refused")
        self.refusal = refusal
        self.tiers: tuple[TierReport, ...] = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))  # its message, as raised


def _name_of(call: Callable[..., Any]) -> str:
    name = getattr(call, "__qualname__", None) or getattr(call, "__name__", None)
    return name if isinstance(name, str) else type(call).__name__


def _own_budget(name: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"Tier: {name} must be an int or None, got {type(value).__name__}")
    if not 0 <= value <= _TIER_LIMIT:
        raise ValueError(f"Tier: {name} must be from 0 to {_TIER_LIMIT}, got {value}")


@dataclass(frozen=True)
class Tier:
    """One rung of an escalation ladder: a model, or a whole callable, with its own budget.

        Tier("qwen2.5-0.5b", max_corrections=0)   # the model name, handed to the function
        Tier(call=extract_with_example)            # another function, same arguments

    A model tier calls the decorated function with the model's name as a keyword argument
    (`model` unless `Escalation(keyword=...)` says otherwise), which the function declares
    and passes on to its client. A callable tier calls `call` instead of the decorated
    function, with the same arguments: another provider, another prompt, grounded decoding.
    Either way `refinekit.current_attempt().tier` is this tier during its calls.

    Attributes:
        model: The model's name. For a callable tier it is optional and only prices the
            tier's first call before it is made (`Budget(max_cost=...)`); it is not passed.
        call: The callable of a callable tier (sync for a `def` function, sync or async for
            an `async def` one), or None for a model tier.
        name: How the tier is named in outcomes, events, errors and reports. Default: the
            model's name, else the callable's qualified name.
        max_corrections: This tier's corrections under `@self_correct` (None: the
            decorator's `max_corrections`), e.g. 0 to move up at the first failure.
        max_retries: This tier's retries under `@retry_on_low_quality` (None: the
            decorator's `max_retries`).

    Raises:
        TypeError: Neither or both of a model tier and a callable tier; a name or model that
            is not a non-empty str; a budget that is not an int.
        ValueError: A budget out of 0 to 100.
    """

    model: str | None = None
    _: KW_ONLY
    call: Callable[..., Any] | None = field(default=None, compare=False)
    name: str = ""
    max_corrections: int | None = None
    max_retries: int | None = None

    def __post_init__(self) -> None:
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise TypeError(f"Tier: model must be a non-empty str, got {self.model!r}")
        if self.call is None and self.model is None:
            raise TypeError(
                "Tier: give the model's name (Tier('gpt-4.1')) or a callable "
                "(Tier(call=my_function))"
            )
        if self.call is not None and not callable(self.call):
            raise TypeError(f"Tier: call must be callable, got {type(self.call).__name__}")
        if not isinstance(self.name, str):
            raise TypeError(f"Tier: name must be a str, got {type(self.name).__name__}")
        _own_budget("max_corrections", self.max_corrections)
        _own_budget("max_retries", self.max_retries)
        if not self.name:
            named = self.model if self.call is None else _name_of(self.call)
            object.__setattr__(self, "name", named or "")


TierLike = Tier | str | Callable[..., Any]
"""What a ladder's list may hold: a `Tier`, a model name, or a callable."""


def _tier(value: object, index: int) -> Tier:
    if isinstance(value, Tier):
        return value
    if isinstance(value, str):
        return Tier(value)
    if callable(value) and not isinstance(value, type):
        return Tier(call=value)
    raise TypeError(
        f"escalate=: tier {index + 1} must be a model name, a callable or a refinekit.Tier, "
        f"got {type(value).__name__}"
    )


def _error_types(value: object) -> tuple[type[BaseException], ...]:
    given = value if isinstance(value, (tuple, list)) else (value,)
    for kind in given:
        if not (isinstance(kind, type) and issubclass(kind, Exception)):
            raise TypeError(
                "Escalation: on_errors must be exception classes (e.g. openai.APIError), got "
                f"{kind!r}"
            )
    return tuple(given)


@dataclass(frozen=True, init=False)
class Escalation:
    """A ladder of tiers, cheapest first, and how a call climbs it.

    Each tier's own budget (its corrections, its retries) runs first; the next tier is tried
    when that budget is spent, when the function raises `refinekit.ModelRefused` (or its
    reply is a refusal), and on the exceptions named in `on_errors`. The last tier's failure
    is raised as without a ladder, carrying every tier's attempts. A `list` given to
    `escalate=` is `Escalation(that_list)`.

    Attributes:
        tiers: Two to ten tiers, cheapest first, distinct by name: `Tier`s, model names, or
            callables.
        keyword: The keyword argument a model tier's name is passed as (the decorated function
            must declare it).
        carry: What the next tier is told. False (the default, which measured better on a
            real model: docs/escalation.md): it starts fresh, from the caller's arguments.
            True: the failed answer and what was wrong with it (for `@self_correct`, the
            correction the failed reply earned; for `@retry_on_low_quality`, the last
            feedback and answer, as a retry gets them), so the stronger tier repairs rather
            than redoes.
        on_errors: Exceptions the function raises that move to the next tier instead of
            propagating (a provider's transport errors, e.g. `openai.APIConnectionError`).
            Empty by default: an error propagates at once, as without a ladder.
        start: `"first"` starts every call at the first tier. `"learned"` skips a tier whose
            measured success rate for this function in the run store makes it not worth its
            cost (docs/escalation.md has the rule).
        db: With `start="learned"`, the run store to learn from: a SQLite file or a
            PostgreSQL URL, as `refinekit eval --db` takes it (None: `$REFINEKIT_DB`, else
            `.refinekit/runs.db`).

    Raises:
        TypeError: A tier, `keyword`, `carry`, `on_errors` or `start` of the wrong type.
        ValueError: Fewer than two or more than ten tiers, two tiers with the same name, or
            an unknown `start`.
    """

    tiers: tuple[Tier, ...]
    keyword: str
    carry: bool
    on_errors: tuple[type[BaseException], ...]
    start: Literal["first", "learned"]
    db: str | None = field(repr=False)

    def __init__(
        self,
        tiers: Sequence[TierLike],
        *,
        keyword: str = "model",
        carry: bool = CARRY_DEFAULT,
        on_errors: type[BaseException] | Sequence[type[BaseException]] = (),
        start: Literal["first", "learned"] = "first",
        db: str | None = None,
    ) -> None:
        given: object = tiers
        if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
            raise TypeError(
                "escalate= takes a list of tiers, cheapest first (model names, callables or "
                f"refinekit.Tier), got {type(given).__name__}"
            )
        made = tuple(_tier(t, i) for i, t in enumerate(given))
        if not 2 <= len(made) <= MAX_TIERS:
            raise ValueError(
                f"escalate= needs from 2 to {MAX_TIERS} tiers (a ladder of one is no ladder: "
                f"use the model directly), got {len(made)}"
            )
        seen: set[str] = set()
        for tier in made:
            if tier.name in seen:
                raise ValueError(
                    f"escalate=: two tiers are named {tier.name!r}; each tier must be distinct "
                    "(give one a name=)"
                )
            seen.add(tier.name)
        for name, value in (
            ("tiers", made),
            ("keyword", keyword),
            ("carry", carry),
            ("on_errors", on_errors),
            ("start", start),
            ("db", db),
        ):
            object.__setattr__(self, name, value)
        self._check()

    def _check(self) -> None:
        if not isinstance(self.keyword, str) or not self.keyword.isidentifier():
            raise TypeError(f"Escalation: keyword must be a parameter name, got {self.keyword!r}")
        if not isinstance(self.carry, bool):
            raise TypeError(f"Escalation: carry must be True or False, got {self.carry!r}")
        if self.start not in ("first", "learned"):
            raise ValueError(f"Escalation: start must be 'first' or 'learned', got {self.start!r}")
        if self.db is not None and not isinstance(self.db, str):
            raise TypeError(f"Escalation: db must be a path or URL (a str), got {self.db!r}")
        object.__setattr__(self, "on_errors", _error_types(self.on_errors))

    @classmethod
    def of(cls, value: object) -> Escalation | None:
        """`escalate=` as given (None, a list, or an `Escalation`) made an `Escalation`."""
        if value is None or isinstance(value, Escalation):
            return value
        return cls(value)  # type: ignore[arg-type]  # checked there


EscalationLike = Escalation | Sequence[TierLike]
"""What `escalate=` takes: an `Escalation`, or its list of tiers."""
