"""Decorated functions pickle with `pickle` and cloudpickle (what Ray and Spark use).

As a function does: by name when importable from a module (unpickled, the very object), by
value otherwise (defined in `__main__` or inside a function: the function and the
decorator's options, decorated again). Neither carries a job, a budget or usage: the copy
behaves as the original with a job of its own per call. Pickling by name of methods and
bound methods with `pickle` is in tests/engine/test_methods.py.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import cloudpickle
import pytest
from helpers import as_kind, call
from pydantic import BaseModel

import refinekit
from refinekit import EvaluationRequest, Verdict, guarded, retry_on_low_quality, reviewed
from refinekit import self_correct as self_correct_
from refinekit._engine import options as _options

DECORATORS = ["retry_on_low_quality", "self_correct", "reviewed", "guarded"]
PICKLERS = {"pickle": pickle, "cloudpickle": cloudpickle}
TEXT = "What is the refund window?"
CONVERSATION = [{"role": "user", "content": TEXT}]


class Named(BaseModel):
    name: str


def again_once(request: EvaluationRequest) -> Verdict:
    """Rejects @retry_on_low_quality's first attempt (only its requests carry `attempt`)."""
    return Verdict(passed=request.metadata.get("attempt") != 1, feedback="say it again")


def passes(request: EvaluationRequest) -> bool:
    return True


def decorator_of(name: str, **options: Any) -> Callable[[Any], Any]:
    if name == "retry_on_low_quality":
        return retry_on_low_quality(**{"evaluator": again_once, "max_retries": 1, **options})
    if name == "self_correct":
        return self_correct_(**{"schema": Named, "max_corrections": 2, **options})
    if name == "reviewed":
        return reviewed(**{"judge": passes, "max_revisions": 0, **options})
    return guarded(**{"screen": passes, **options})


def body(name: str) -> Callable[..., Any]:
    """The function to decorate; @self_correct's first reply is not JSON (one correction)."""
    if name == "retry_on_low_quality":

        def answer(text: str, feedback: str | None = None) -> Any:
            return f"{text} ({feedback})"

    elif name == "self_correct":

        def answer(messages: list[dict[str, Any]]) -> Any:
            return "not JSON" if len(messages) == 1 else '{"name": "alice"}'

    else:

        def answer(text: str) -> Any:
            return f"answer to {text}"

    return answer


def argument(name: str) -> Any:
    return CONVERSATION if name == "self_correct" else TEXT


def local(name: str, kind: str, **options: Any) -> Any:
    """A decorated function defined inside a function: it pickles by value."""
    return decorator_of(name, **options)(as_kind(kind, body(name)))


def same_behaviour(original: Any, restored: Any, name: str) -> None:
    """The restored object answers as the original does, with the same outcome."""
    first = call(original.outcome, argument(name))
    second = call(restored.outcome, argument(name))
    assert second.value == first.value
    assert second.decorator == first.decorator == name
    assert second.function == first.function
    assert second.attempt_count == first.attempt_count
    assert [a.verdict.passed if a.verdict else None for a in second.attempts] == [
        a.verdict.passed if a.verdict else None for a in first.attempts
    ]
    assert second.corrections_used == first.corrections_used
    assert second.job_id != first.job_id
    assert call(restored, argument(name)) == first.value


# --- by name: module-level functions, sync and async --------------------------------------------


@retry_on_low_quality(evaluator=again_once, max_retries=1)
def retry_sync(text: str, feedback: str | None = None) -> str:
    return f"{text} ({feedback})"


@retry_on_low_quality(evaluator=again_once, max_retries=1)
async def retry_async(text: str, feedback: str | None = None) -> str:
    return f"{text} ({feedback})"


@self_correct_(schema=Named)
def correct_sync(messages: list[dict[str, Any]]) -> str:
    return "not JSON" if len(messages) == 1 else '{"name": "alice"}'


@self_correct_(schema=Named)
async def correct_async(messages: list[dict[str, Any]]) -> str:
    return "not JSON" if len(messages) == 1 else '{"name": "alice"}'


@reviewed(judge=passes, max_revisions=0)
def reviewed_sync(text: str) -> str:
    return f"answer to {text}"


@reviewed(judge=passes, max_revisions=0)
async def reviewed_async(text: str) -> str:
    return f"answer to {text}"


@guarded(screen=passes)
def guarded_sync(text: str) -> str:
    return f"answer to {text}"


@guarded(screen=passes)
async def guarded_async(text: str) -> str:
    return f"answer to {text}"


MODULE_LEVEL = {
    ("retry_on_low_quality", "sync"): retry_sync,
    ("retry_on_low_quality", "async"): retry_async,
    ("self_correct", "sync"): correct_sync,
    ("self_correct", "async"): correct_async,
    ("reviewed", "sync"): reviewed_sync,
    ("reviewed", "async"): reviewed_async,
    ("guarded", "sync"): guarded_sync,
    ("guarded", "async"): guarded_async,
}


class Service:
    def __init__(self, owner: str) -> None:
        self.owner = owner

    @retry_on_low_quality(evaluator=again_once, max_retries=1)
    def answer(self, text: str, feedback: str | None = None) -> str:
        return f"{self.owner}: {text} ({feedback})"

    @classmethod
    @guarded(screen=passes)
    async def create(cls, text: str) -> str:
        return f"{cls.__name__}: {text}"


@pytest.mark.parametrize("pickler", list(PICKLERS))
@pytest.mark.parametrize("name", DECORATORS)
def test_a_module_level_function_pickles_by_name(name: str, kind: str, pickler: str) -> None:
    fn = MODULE_LEVEL[name, kind]
    restored = PICKLERS[pickler].loads(PICKLERS[pickler].dumps(fn))
    assert restored is fn
    assert call(restored, argument(name)) == call(fn, argument(name))


@pytest.mark.parametrize("pickler", list(PICKLERS))
def test_methods_and_bound_methods_pickle_by_name(pickler: str) -> None:
    dumps, loads = PICKLERS[pickler].dumps, PICKLERS[pickler].loads
    assert loads(dumps(Service.answer)) is Service.__dict__["answer"]
    bound = loads(dumps(Service("alice").answer))
    assert bound.__self__.owner == "alice"
    assert call(bound, TEXT) == f"alice: {TEXT} (say it again)"
    assert call(loads(dumps(Service.create)), TEXT) == f"Service: {TEXT}"


# --- by value: defined inside a function, or in __main__ ----------------------------------------


@pytest.mark.parametrize("pickler", list(PICKLERS))
@pytest.mark.parametrize("name", DECORATORS)
def test_a_function_defined_inside_a_function_pickles_by_value(
    name: str, kind: str, pickler: str
) -> None:
    fn = local(name, kind)
    restored = PICKLERS[pickler].loads(PICKLERS[pickler].dumps(fn))
    assert restored is not fn
    assert type(restored) is type(fn)
    assert repr(restored) == repr(fn)
    assert restored.__name__ == fn.__name__
    same_behaviour(fn, restored, name)


def test_the_options_travel_with_the_function() -> None:
    strict = local("retry_on_low_quality", "sync", max_retries=0)
    restored = cloudpickle.loads(cloudpickle.dumps(strict))
    with pytest.raises(refinekit.LowQualityAnswer):
        restored(TEXT)  # no retry: the first, rejected attempt is the last
    assert call(restored.retry_with(max_retries=1), TEXT) == f"{TEXT} (say it again)"

    one = local("self_correct", "async", max_corrections=0)
    with pytest.raises(refinekit.JsonParseError):
        call(cloudpickle.loads(cloudpickle.dumps(one)), CONVERSATION)


def test_stacked_decorators_pickle_by_value() -> None:
    inner = local("self_correct", "sync")
    outer = guarded(screen=passes)(inner)
    restored = cloudpickle.loads(cloudpickle.dumps(outer))
    outcome = restored.outcome(CONVERSATION)
    assert outcome.value == Named(name="alice")
    assert outcome.decorator == "guarded"
    assert outcome.corrections_used == 1


def test_methods_of_a_class_defined_in_a_function_pickle_by_value() -> None:
    class Local:
        def __init__(self, owner: str) -> None:
            self.owner = owner

        @retry_on_low_quality(evaluator=again_once, max_retries=1)
        def answer(self, text: str, feedback: str | None = None) -> str:
            return f"{self.owner}: {text} ({feedback})"

        @classmethod
        @self_correct_(schema=Named)
        def parse(cls, messages: list[dict[str, Any]]) -> str:
            assert messages[0] == CONVERSATION[0]  # never the class
            return "not JSON" if len(messages) == 1 else f'{{"name": "{cls.__name__}"}}'

    bound = cloudpickle.loads(cloudpickle.dumps(Local("bob").answer))
    assert bound(TEXT) == f"bob: {TEXT} (say it again)"
    assert bound.outcome(TEXT).attempt_count == 2
    restored = cloudpickle.loads(cloudpickle.dumps(Local))  # (this process: the same class)
    assert restored("carol").answer(TEXT) == f"carol: {TEXT} (say it again)"
    # called through the class with the instance first, as a method is
    assert restored.answer(restored("dan"), TEXT) == f"dan: {TEXT} (say it again)"
    assert restored.parse(CONVERSATION) == Named(name="Local")


MAIN_SCRIPT = """
import sys, cloudpickle
from pydantic import BaseModel
from refinekit import retry_on_low_quality, self_correct, Verdict

class Invoice(BaseModel):
    total: int

@self_correct(schema=Invoice, max_corrections=1)
def extract(messages):
    return "not JSON" if len(messages) == 1 else '{"total": 42}'

@retry_on_low_quality(evaluator=lambda r: Verdict(passed="!" in r.answer, feedback="shout"))
async def shout(text, feedback=None):
    return text + ("!" if feedback else "")

class Desk:
    def __init__(self, owner):
        self.owner = owner

    @retry_on_low_quality(evaluator=lambda r: True)
    def answer(self, text, feedback=None):
        return self.owner + ": " + text

sys.stdout.buffer.write(cloudpickle.dumps((extract, shout, Desk("ann").answer, Desk)))
"""

LOAD_SCRIPT = """
import asyncio, pickle, sys
extract, shout, answer, Desk = pickle.loads(sys.stdin.buffer.read())
outcome = extract.outcome([{"role": "user", "content": "the invoice"}])
print(repr(outcome.value), outcome.corrections_used, asyncio.run(shout("hi")))
print(answer("q"), Desk("bo").answer("r"), Desk.answer(Desk("cy"), "s"))
"""


def test_a_function_of_main_pickles_by_value_for_another_process() -> None:
    # What Ray does with a driver script: the workers have another `__main__`.
    dumped = subprocess.run(
        [sys.executable, "-c", MAIN_SCRIPT], capture_output=True, check=True, timeout=60
    ).stdout
    loaded = subprocess.run(
        [sys.executable, "-c", LOAD_SCRIPT],
        input=dumped,
        capture_output=True,
        check=True,
        timeout=60,
    )
    assert loaded.stdout.decode().splitlines() == ["Invoice(total=42) 1 hi!", "ann: q bo: r cy: s"]


def test_an_option_that_does_not_pickle_is_named() -> None:
    lock = threading.Lock()

    def screen(request: EvaluationRequest) -> bool:
        with lock:
            return True

    fn = local("guarded", "sync", screen=screen)
    with pytest.raises(pickle.PicklingError, match=r"option of @guarded does not pickle"):
        cloudpickle.dumps(fn)


def test_without_cloudpickle_a_local_function_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_options, "_cloudpickle_dumps", lambda: None)
    with pytest.raises(pickle.PicklingError, match=r"pip install cloudpickle.*module level"):
        pickle.dumps(local("reviewed", "sync"))
    assert pickle.loads(pickle.dumps(reviewed_sync)) is reviewed_sync  # by name, unchanged


# --- no job in a pickle -------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["module level", "local"])
def test_a_pickle_carries_no_job_or_budget(kind: str, where: str) -> None:
    fn = (
        MODULE_LEVEL["self_correct", kind]
        if where == "module level"
        else local("self_correct", kind)
    )
    with refinekit.job() as spent:
        call(fn, CONVERSATION)  # one correction spent in this job
        assert spent.corrections_used == 1
        data = cloudpickle.dumps(fn)  # pickled inside the job, its budget partly spent
    restored = cloudpickle.loads(data)
    outcome = call(restored.outcome, CONVERSATION)
    assert outcome.corrections_used == 1  # its own job: 1, not 2
    assert outcome.job_id != spent.id
    assert outcome.usage == refinekit.Usage()  # nothing carried over
    assert refinekit.current_job() is None
