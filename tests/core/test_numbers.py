"""Number options no float can hold (`10**400`), infinite or NaN: the option's documented error.

`math.isfinite`, `math.isnan` and `float()` raise `OverflowError` on an int that large; every
numeric option refinekit checks gives the `ValueError` its docs name instead, with a message
that names the option and says what to give, and never prints the 401 digits.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import openai
import pytest
from pydantic import BaseModel, ValidationError

import refinekit
import refinekit.eval
from refinekit import (
    Budget,
    ContextDocument,
    EvaluationRequest,
    InSource,
    Prices,
    checks,
    judges,
    response_format,
    weighted,
)
from refinekit._core.numbers import is_real, number_value, read_numbers, shown
from refinekit.local import LocalModel
from refinekit.testing import Reply

HUGE = 10**400


def client() -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-test", base_url="http://127.0.0.1:9/v1")


def decorate(**options: Any) -> Callable[[], Any]:
    return lambda: refinekit.retry_on_low_quality(**options)(lambda q: q)


OPTIONS: dict[str, tuple[Callable[[Any], object], str]] = {
    # what is made with the number, and what the message must say
    "Budget(max_calls=)": (lambda n: Budget(max_calls=n), "max_calls must be above 0"),
    "Budget(max_tokens=)": (lambda n: Budget(max_tokens=n), "max_tokens must be above 0"),
    "Budget(max_cost=)": (
        lambda n: Budget(max_cost=n, prices=Prices({"m": (1, 1)})),
        "max_cost must be above 0",
    ),
    "Prices input price": (
        lambda n: Prices({"m": (n, 1)}),
        "input price of 'm' must be a finite number >= 0",
    ),
    "Prices output price": (
        lambda n: Prices({"m": (1, n)}),
        "output price of 'm' must be a finite number >= 0",
    ),
    "Prices default": (
        lambda n: Prices({}, default=(n, 0)),
        "input price of 'default' must be a finite number >= 0",
    ),
    "a price callable's cost": (
        lambda n: Prices(lambda model, prompt, completion: n).cost("m", 1, 1),
        "price callable returned .* for model 'm'; it must return a finite number >= 0",
    ),
    "reviewed(budget=)": (
        lambda n: refinekit.reviewed(judge=lambda r: True, budget=n),
        "budget must be a finite number of seconds > 0",
    ),
    "reviewed(judge_timeout=)": (
        lambda n: refinekit.reviewed(judge=lambda r: True, judge_timeout=n),
        "judge_timeout must be a finite number of seconds > 0",
    ),
    "retry_on_low_quality(wait=)": (
        lambda n: decorate(wait=n)(),
        "wait must be a finite number of seconds >= 0",
    ),
    "weighted() weight": (
        lambda n: weighted((checks.not_empty(), n)),
        "weight of not_empty must be a finite number > 0",
    ),
    "JudgeModel(timeout=)": (
        lambda n: judges.JudgeModel(client(), "judge", timeout=n),
        "timeout must be a finite number of seconds > 0",
    ),
    "LocalModel(startup_timeout=)": (
        lambda n: LocalModel(startup_timeout=n),
        "startup_timeout must be positive and finite",
    ),
    "Reply.delay()": (
        lambda n: Reply.delay(n, "late"),
        r"a delay is >= 0 seconds \(a finite number\)",
    ),
    "Reply.error(retry_after=)": (
        lambda n: Reply.error(429, retry_after=n),
        "retry_after is seconds >= 0 or a str",
    ),
}


INT_OPTIONS = {"Budget(max_calls=)", "Budget(max_tokens=)"}
"""Options that take an int only: a float (infinite or NaN too) is their TypeError."""


@pytest.mark.parametrize(
    "value", [HUGE, -HUGE, float("inf"), float("nan")], ids=["huge", "-huge", "inf", "nan"]
)
@pytest.mark.parametrize("option", list(OPTIONS))
def test_a_number_no_float_can_hold_is_a_value_error(option: str, value: float) -> None:
    make, says = OPTIONS[option]
    if option in INT_OPTIONS and isinstance(value, float):
        error: type[Exception] = TypeError
        says = "must be an int or None, not float"
    else:
        error = ValueError
    with pytest.raises(error, match=says) as raised:
        make(value)
    assert not isinstance(raised.value, OverflowError)
    assert str(HUGE) not in str(raised.value)  # shown by its size, not its 401 digits
    if isinstance(value, int):
        assert "an int of 401 digits" in str(raised.value), str(raised.value)


def test_sqlite_cache_timeout(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="timeout must be a finite number of seconds >= 0"):
        judges.SQLiteCache(tmp_path / "cache.sqlite", timeout=HUGE)
    assert not (tmp_path / "cache.sqlite").exists()


def test_large_numbers_a_float_holds_still_work() -> None:
    assert Budget(max_calls=10**300).max_calls == 10**300
    assert Prices({"m": (10**300, 0)}).cost("m", 1, 0) == pytest.approx(1e294)
    assert Prices(lambda m, p, c: 10**300).cost("m", 1, 1) == 1e300
    assert judges.JudgeModel(client(), "judge", timeout=10**6).timeout == 10**6


def test_shown_and_is_real() -> None:
    assert shown(10**400) == "an int of 401 digits"
    assert shown(-(10**5000)) == "an int of 5001 digits"  # repr would raise past 4300 digits
    assert shown(12) == "12"
    assert shown(float("nan")) == "nan"
    assert is_real(10**308)
    assert not is_real(10**309)
    assert not is_real(float("-inf"))


@pytest.mark.parametrize(
    ("option", "says"),
    [
        ("max_cost", "max_cost must be a number above 0"),
        ("min_pass_rate", "min_pass_rate must be a number from 0 to 1"),
        ("alpha", "alpha must be a number"),
    ],
)
@pytest.mark.parametrize("value", [HUGE, -HUGE], ids=["huge", "-huge"])
def test_an_eval_option_no_float_can_hold_is_a_usage_problem(
    tmp_path: Path, option: str, says: str, value: int
) -> None:
    golden = tmp_path / "golden.csv"
    golden.write_text("question\nWhat is 2+2?\n", encoding="utf-8")
    extra: dict[str, Any] = {option: value}
    if option == "max_cost":
        extra["prices"] = {"m": (1, 1)}
    with pytest.raises(refinekit.eval.UsageProblem, match=says) as raised:
        refinekit.eval.run(golden, target=lambda question: "4", db=tmp_path / "runs.db", **extra)
    assert "an int of 401 digits" in str(raised.value)
    assert not (tmp_path / "runs.db").exists()


# --- numbers read from a text: one reader, exact, whole, linear --------------------------------


def test_numbers_are_read_exactly_as_written() -> None:
    text = (
        "Paid 1,020.50 of 12345678901234567890123456789, 15 % off, code FA00731, v2, " + "9" * 5000
    )
    read = [(n.written, n.value, n.percent) for n in read_numbers(text)]
    assert read == [
        ("1,020.50", Decimal("1020.50"), False),
        ("12345678901234567890123456789", Decimal("12345678901234567890123456789"), False),
        ("15 %", Decimal(15), True),
        ("9" * 5000, Decimal("9" * 5000), False),
    ]
    assert read[1][1] != Decimal("12345678901234567890123456790")
    assert number_value(12345678901234567890123456789) == read[1][1]
    assert number_value(10**5000) == Decimal(10**5000)  # no int-to-str conversion limit
    assert number_value(0.1) == Decimal("0.1")  # a float as written, not its binary value
    assert number_value(float("inf")) is None
    assert number_value(True) is None


def test_reading_a_long_word_of_digits_takes_linear_time() -> None:
    # digits, then letters, then a digit: the reader's old pattern backtracked through every
    # digit and rescanned the word each time (half a minute at this size; milliseconds now)
    word = "1" * 60_000 + "a" * 60_000 + "1"
    started = time.perf_counter()
    assert [n.value for n in read_numbers(f"{word} and 4321.09")] == [Decimal("4321.09")]
    assert time.perf_counter() - started < 5


class _GroundedFloat(BaseModel):
    value: Annotated[float, InSource]


@pytest.mark.parametrize("reply", ['{"value": 1e400}', '{"value": -1e400}', '{"value": "NaN"}'])
def test_a_float_field_read_as_nan_or_an_infinity_is_not_in_the_source(reply: str) -> None:
    with pytest.raises(ValidationError, match="not a number the text states"):
        _GroundedFloat.model_validate_json(reply, context={"source": "Total 1 EUR"})


class _Grounded(BaseModel):
    value: Annotated[Decimal, InSource]


@pytest.mark.parametrize(
    ("text", "value", "stated"),
    [
        ("Total 12.50 EUR", "12.5", True),
        ("Total 1,020.50", "1020.5", True),
        ("Total 1", "1e400", False),
        ("Total 12345678901234567890123456789", "12345678901234567890123456790", False),
        ("x " * 15_000 + "Total 4321.09", "4321.09", True),
        ("x " * 15_000 + "Total 4321.09", "4321.9", False),
        ("Checksum " + "7" * 5000, "7" * 5000, True),
    ],
    ids=["trailing-zero", "thousands", "1e400", "29-digits", "far", "far-wrong", "5000-digits"],
)
def test_the_validator_both_checks_and_the_enum_read_a_text_alike(
    text: str, value: str, stated: bool
) -> None:
    """InSource, numbers_supported, values_supported and the grounded enum agree."""
    in_source = True
    try:
        _Grounded.model_validate({"value": Decimal(value)}, context={"source": text})
    except ValidationError:
        in_source = False
    request = EvaluationRequest(
        question="?", answer=f'{{"value": {value}}}', context=(ContextDocument(text),)
    )
    prose = request.model_copy(update={"answer": f"It is {value} in all."})
    assert in_source is stated
    assert checks.values_supported().evaluate(request).passed is stated
    if "e" not in value:  # prose writes no exponent: 1e400 is a code there, not a number
        assert checks.numbers_supported().evaluate(prose).passed is stated
        assert checks.values_supported().evaluate(prose).passed is stated
    made = response_format(_Grounded, dialect="llama.cpp", source=text)
    enum = made["response_format"]["schema"]["properties"]["value"].get("enum")
    if enum is not None:  # (left free when no JSON number states the text's exactly)
        offered = [Decimal(json.dumps(v)) for v in enum]
        assert (Decimal(value) in offered) is stated
