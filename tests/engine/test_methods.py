"""The decorators on methods, classmethods and staticmethods, sync and async.

A decorated method binds as a function does (the descriptor protocol); `@classmethod` and
`@staticmethod` may sit above or below the refinekit decorator. The receiver (`self`, `cls`) is
never one of the arguments a decorator reads: not the question, not the conversation, not in
the bound arguments a `question=` / `input=` / `validation_context=` callable gets.
"""

from __future__ import annotations

import copy
import inspect
import pickle
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from helpers import as_kind, call
from pydantic import BaseModel

import refinekit
from refinekit import (
    EvaluationRequest,
    Verdict,
    guarded,
    retry_on_low_quality,
    reviewed,
    self_correct,
)

TEXT = "What is the refund window?"
CONVERSATION = [{"role": "user", "content": TEXT}]


class Named(BaseModel):
    name: str


class Seen:
    """What the decorator read: the bound arguments its callable got, the requests judged."""

    def __init__(self) -> None:
        self.arguments: list[list[str]] = []
        self.requests: list[EvaluationRequest] = []

    def select(self, arguments: Mapping[str, Any]) -> str:
        self.arguments.append(list(arguments))
        return str(arguments["text"])

    def context(self, arguments: Mapping[str, Any]) -> None:
        self.arguments.append(list(arguments))
        return None

    def judge(self, request: EvaluationRequest) -> Verdict:
        self.requests.append(request)
        again = request.metadata.get("attempt") == 1  # only @retry_on_low_quality's requests
        return Verdict(passed=not again, feedback="say it again")


def decorator_of(name: str, seen: Seen) -> Callable[[Any], Any]:
    if name == "retry_on_low_quality":
        return retry_on_low_quality(evaluator=seen.judge, max_retries=1, question=seen.select)
    if name == "self_correct":
        return self_correct(schema=Named, validation_context=seen.context)
    if name == "reviewed":
        return reviewed(judge=seen.judge, max_revisions=0, question=seen.select)
    return guarded(screen=seen.judge, input=seen.select)


def implementation(name: str, kind: str) -> Callable[..., Any]:
    """The method's body: `owner` is the receiver's name (`static` for a staticmethod)."""
    if name == "retry_on_low_quality":

        def answer(owner: str, text: str, feedback: str | None = None) -> Any:
            return f"{owner}: {text} ({feedback})"

    elif name == "self_correct":

        def answer(owner: str, messages: list[dict[str, Any]]) -> Any:
            assert messages[0] == CONVERSATION[0]
            # a reply that is not JSON first: the correction keeps the receiver bound
            return "not JSON" if len(messages) == 1 else f'{{"name": "{owner}"}}'

    else:

        def answer(owner: str, text: str) -> Any:
            return f"{owner}: {text}"

    return answer


def expected(name: str, owner: str) -> Any:
    if name == "retry_on_low_quality":
        return f"{owner}: {TEXT} (say it again)"
    if name == "self_correct":
        return Named(name=owner)
    return f"{owner}: {TEXT}"


DECORATORS = ["retry_on_low_quality", "self_correct", "reviewed", "guarded"]
BINDINGS = [
    "method",
    "classmethod above",  # @classmethod over the refinekit decorator
    "classmethod below",  # the refinekit decorator over @classmethod
    "staticmethod above",
    "staticmethod below",
]


def make_class(name: str, kind: str, binding: str, seen: Seen) -> type:
    """A service class with one decorated method `answer`, bound as `binding` says."""
    body = implementation(name, kind)
    deco = decorator_of(name, seen)
    argument = "messages" if name == "self_correct" else "text"
    extra = ", feedback=None" if name == "retry_on_low_quality" else ""
    passed = f"{argument}{', feedback' if extra else ''}"
    prefix = "async " if kind == "async" else ""
    receiver = {"method": "self", "classmethod": "cls", "staticmethod": ""}[binding.split()[0]]
    owner = {"self": "self.name", "cls": "cls.__name__", "": "'static'"}[receiver]
    params = ", ".join(p for p in (receiver, f"{argument}{extra}") if p)
    kind_decorator = binding.split()[0] if binding != "method" else None
    lines = []
    if kind_decorator is not None and binding.endswith("above"):
        lines.append(f"    @{kind_decorator}")
    lines.append("    @deco")
    if kind_decorator is not None and binding.endswith("below"):
        lines.append(f"    @{kind_decorator}")
    lines.append(f"    {prefix}def answer({params}):")
    lines.append(f'        "The answer."\n        return body({owner}, {passed})')
    source = "class Service:\n    def __init__(self, name):\n        self.name = name\n\n"
    source += "\n".join(lines) + "\n"
    namespace: dict[str, Any] = {"deco": deco, "body": body}
    exec(source, namespace)
    return namespace["Service"]  # type: ignore[no-any-return]


def argument_of(name: str) -> Any:
    return CONVERSATION if name == "self_correct" else TEXT


def read_arguments(name: str) -> list[str]:
    """The bound arguments a decorator's callable gets: never the receiver."""
    if name == "retry_on_low_quality":
        return ["text", "feedback"]
    return ["messages"] if name == "self_correct" else ["text"]


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("name", DECORATORS)
def test_a_decorated_method_binds_its_receiver_and_never_reads_it(
    name: str, binding: str, kind: str
) -> None:
    seen = Seen()
    service_class = make_class(name, kind, binding, seen)
    service = service_class("alice")
    owner = {"method": "alice", "classmethod": "Service", "staticmethod": "static"}[
        binding.split()[0]
    ]
    assert call(service.answer, argument_of(name)) == expected(name, owner)
    # through the class too: a method then takes its instance first, as a function does
    if binding == "method":
        assert call(service_class.answer, service, argument_of(name)) == expected(name, owner)
    else:
        assert call(service_class.answer, argument_of(name)) == expected(name, owner)
    assert seen.arguments, "the decorator's callable of the bound arguments was called"
    assert all(a == read_arguments(name) for a in seen.arguments)
    for request in seen.requests:  # the receiver is never the question
        screened_input = request.metadata.get("screened") == "input"
        assert (request.answer if screened_input else request.question) == TEXT
    outcome = call(service.answer.outcome, argument_of(name))
    assert isinstance(outcome, refinekit.Outcome)
    assert outcome.value == expected(name, owner)
    assert vars(service) == {"name": "alice"}  # nothing stored on the instance


@pytest.mark.parametrize("name", DECORATORS)
def test_two_instances_keep_their_own_state(name: str, kind: str) -> None:
    service_class = make_class(name, kind, "method", Seen())
    alice, bob = service_class("alice"), service_class("bob")
    assert call(alice.answer, argument_of(name)) == expected(name, "alice")
    assert call(bob.answer, argument_of(name)) == expected(name, "bob")
    assert call(alice.answer, argument_of(name)) == expected(name, "alice")
    assert alice.answer.__self__ is alice
    assert bob.answer.__self__ is bob
    assert vars(alice) == {"name": "alice"}
    assert vars(bob) == {"name": "bob"}
    # each lookup binds afresh, as for a function: nothing is cached per instance
    assert alice.answer is not alice.answer
    assert vars(service_class.__dict__["answer"]).get("_bound_cfg") is not None


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("name", DECORATORS)
def test_signature_wrapped_and_coroutine_function_stay_useful(
    name: str, binding: str, kind: str
) -> None:
    service_class = make_class(name, kind, binding, Seen())
    service = service_class("alice")
    argument = "messages" if name == "self_correct" else "text"
    expected_params = [argument, "feedback"] if name == "retry_on_low_quality" else [argument]
    assert list(inspect.signature(service.answer).parameters) == expected_params
    if binding == "method":
        unbound = list(inspect.signature(service_class.answer).parameters)
        assert unbound == ["self", *expected_params]
    else:
        assert list(inspect.signature(service_class.answer).parameters) == expected_params
    assert inspect.iscoroutinefunction(service.answer) == (kind == "async")
    assert inspect.iscoroutinefunction(service_class.answer) == (kind == "async")
    assert service.answer.__name__ == "answer"
    assert service.answer.__qualname__ == "Service.answer"
    assert service.answer.__doc__ == "The answer."
    # `__wrapped__` leads to the function as written
    original = inspect.unwrap(service_class.__dict__["answer"])
    if isinstance(original, (classmethod, staticmethod)):
        original = original.__func__
    assert inspect.isfunction(original)
    assert original.__name__ == "answer"
    assert inspect.iscoroutinefunction(original) == (kind == "async")


def test_retry_with_on_a_bound_method_stays_bound_and_leaves_the_original(kind: str) -> None:
    seen = Seen()
    service_class = make_class("retry_on_low_quality", kind, "method", seen)
    service = service_class("alice")
    strict = service.answer.retry_with(max_retries=0)
    assert strict.__self__ is service
    with pytest.raises(refinekit.LowQualityAnswer):
        call(strict, TEXT)
    assert call(service.answer, TEXT) == expected("retry_on_low_quality", "alice")
    # and through the class, the variant is still a method
    unbound = service_class.answer.retry_with(max_retries=0)
    with pytest.raises(refinekit.LowQualityAnswer) as raised:
        call(unbound, service, TEXT)
    assert raised.value.attempts[0].answer == "alice: What is the refund window? (None)"


def test_stacked_decorators_on_a_method_bind_once() -> None:
    seen = Seen()

    class Service:
        def __init__(self, name: str) -> None:
            self.name = name

        @retry_on_low_quality(evaluator=seen.judge, max_retries=1, question=seen.select)
        @guarded(screen=lambda request: True, input=seen.select)
        def answer(self, text: str, feedback: str | None = None) -> str:
            return f"{self.name}: {text} ({feedback})"

    service = Service("alice")
    assert service.answer(TEXT) == "alice: What is the refund window? (say it again)"
    assert Service.answer(service, TEXT) == "alice: What is the refund window? (say it again)"
    assert all(a == ["text", "feedback"] for a in seen.arguments)
    assert list(inspect.signature(service.answer).parameters) == ["text", "feedback"]


def test_a_method_without_the_argument_a_decorator_needs_is_refused_at_class_creation() -> None:
    with pytest.raises((TypeError, RuntimeError)) as raised:

        class Service:
            @self_correct(schema=Named)
            def extract(self) -> str:  # no conversation after `self`
                return "{}"

    error = raised.value if isinstance(raised.value, TypeError) else raised.value.__cause__
    assert isinstance(error, TypeError)
    assert "conversation" in str(error)


def test_tool_methods_never_record_their_receiver() -> None:
    class Shop:
        def __init__(self) -> None:
            self.stock = {"A1": 3}

        @refinekit.tool
        def lookup(self, order_id: str) -> int:
            return self.stock[order_id]

        @refinekit.tool
        @classmethod
        def policy(cls, topic: str) -> str:
            return f"{cls.__name__} {topic}: 30 days"

        @staticmethod
        @refinekit.tool
        def today(zone: str) -> str:
            return f"monday in {zone}"

    shop = Shop()
    requests: list[EvaluationRequest] = []

    def judge(request: EvaluationRequest) -> bool:
        requests.append(request)
        return True

    @retry_on_low_quality(evaluator=judge)
    def answer(question: str) -> str:
        return f"{shop.lookup('A1')} {Shop.policy('refunds')} {shop.today('UTC')}"

    assert answer("q") == "3 Shop refunds: 30 days monday in UTC"
    calls = [(c.name, c.arguments) for c in requests[0].tool_calls]
    assert calls == [
        ("lookup", '{"order_id":"A1"}'),
        ("policy", '{"topic":"refunds"}'),
        ("today", '{"zone":"UTC"}'),
    ]


class Answerer:
    """A callable object: in a class body it is not bound (it has no `__get__`)."""

    def __call__(self, text: str) -> str:
        return f"object: {text}"


def test_a_callable_object_in_a_class_body_stays_unbound() -> None:
    seen = Seen()

    class Service:
        answer = retry_on_low_quality(evaluator=lambda r: True, question=seen.select)(Answerer())

    assert Service().answer(TEXT) == f"object: {TEXT}"
    assert Service.answer(TEXT) == f"object: {TEXT}"
    assert seen.arguments == [["text"], ["text"]]


@retry_on_low_quality(evaluator=lambda r: True)
def module_level(question: str) -> str:
    return question


class Module:
    @guarded(screen=lambda r: True)
    def method(self, question: str) -> str:
        return question


def test_decorated_functions_pickle_by_name_as_functions_do() -> None:
    assert pickle.loads(pickle.dumps(module_level)) is module_level
    assert pickle.loads(pickle.dumps(Module.method)) is Module.__dict__["method"]
    assert copy.copy(module_level) is module_level
    assert copy.deepcopy(module_level) is module_level


def test_an_argument_named_self_passes_by_keyword(kind: str) -> None:
    def join(self: str, question: str) -> str:
        return self + question

    decorated = retry_on_low_quality(evaluator=lambda r: True)(as_kind(kind, join))
    assert call(decorated, self="a", question="c") == "ac"
    assert call(decorated.outcome, self="a", question="c").value == "ac"


def test_instances_without_a_dict_work() -> None:
    class Slotted:
        __slots__ = ("name",)

        def __init__(self, name: str) -> None:
            self.name = name

        @retry_on_low_quality(evaluator=lambda r: True)
        def answer(self, question: str) -> str:
            return f"{self.name}: {question}"

    impl = Slotted.__dict__["answer"]
    assert call(Slotted("alice").answer, TEXT) == f"alice: {TEXT}"
    assert call(impl.outcome, Slotted("bob"), TEXT).value == f"bob: {TEXT}"


def test_a_bound_method_copies_and_pickles_as_a_bound_method_does() -> None:
    bound = Module().method
    assert copy.copy(bound).__self__ is bound.__self__
    assert copy.copy(bound)("q") == "q"
    restored = pickle.loads(pickle.dumps(bound))
    assert isinstance(restored.__self__, Module)
    assert restored("q") == "q"
