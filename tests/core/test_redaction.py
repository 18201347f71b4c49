"""No credential reaches an exception, a log, an event, the run store, a report or the terminal.

`redact` on its own (examples and properties); a judge over real HTTP to the scripted server
whose endpoint echoes the configured key (or a key-shaped token, or a `Bearer` value) in its
error body; and `refinekit eval` with a target whose error quotes a URL's password.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import re
import string
from collections.abc import AsyncIterator, Callable
from typing import Any

import openai
import pytest
from helpers import (
    Cli,
    Workspace,
    acall,
    answering,
    answers,
    close_clients,
    judge_replies,
    table,
)
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import refinekit
from refinekit import (
    EvaluationRequest,
    Event,
    JudgeMisconfigured,
    JudgeUnavailable,
    LowQualityAnswer,
    RefinekitWarning,
    guarded,
    judges,
    retry_on_low_quality,
)
from refinekit._core.redact import client_secrets, redact, registered_secrets
from refinekit.judges import JudgeModel
from refinekit.testing import Reply, ScriptedOpenAI

JUDGE = "judge"
GATEWAY_KEY = "my-gateway-key-123"  # a configured key of no known shape
PROJECT_KEY = "sk-proj-Zq81vXw2mNe4RtY6uI0oP9aS"
BEARER_TOKEN = "gw-tok-Zq81vXw2"
PASSWORD = "hunter2pass"
REQUEST = EvaluationRequest(question="Can I get a refund?", answer="Within seven days.")


# --- redact: examples --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "secret", "kept"),
    [
        (
            "500 Server Error for url: http://bob:hunter2pass@api.example/v1/chat",
            "hunter2pass",
            "500 Server Error for url: http://[redacted]@api.example/v1/chat",
        ),
        ("redis://:hunter2pass@cache:6379/0", "hunter2pass", "redis://[redacted]@cache:6379/0"),
        ("clone https://ghtoken12345@git.example/x", "ghtoken12345", "https://[redacted]@git."),
        (
            f"Incorrect API key provided: {PROJECT_KEY}.",
            "Zq81vXw2mNe4",
            "provided: [redacted key].",
        ),
        ("key sk-proj-****************************abcd is wrong", "****abcd", "[redacted key] is"),
        ("Authorization: Bearer my-gateway-key-123", "gateway", "Authorization: Bearer [redacted]"),
        ("authorization: abcdefgh", "abcdefgh", "authorization: [redacted]"),
        ("upstream said Bearer gw-tok-Zq81vXw2", "Zq81vXw2", "said Bearer [redacted]"),
        ("proxy said Basic dXNlcjpwYXNz", "dXNlcjpwYXNz", "Basic [redacted]"),
        ("api-key: 0123456789abcdef", "0123456789abcdef", "api-key: [redacted]"),
        ("x-api-key: 0123456789abcdef", "0123456789abcdef", "x-api-key: [redacted]"),
        ("OPENAI_API_KEY=my-gateway-key-123 is set", "gateway", "OPENAI_API_KEY=[redacted] is"),
        ("GET /v1?api-version=2024-02-01&key=abcd1234", "abcd1234", "2024-02-01&key=[redacted]"),
        ("token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln expired", "eyJzdWIi", "[redacted key]"),
    ],
)
def test_redact_removes_the_credential_and_keeps_the_rest(
    text: str, secret: str, kept: str
) -> None:
    redacted = redact(text)
    assert secret not in redacted
    assert kept in redacted


@pytest.mark.parametrize(
    "text",
    [
        "Basic information about refunds is missing",
        "the bearer instrument is not named",
        "see https://example.com/docs?page=2 and git@github.com:org/repo",
        "mail bob@example.com about the 3 tokens left",
        "HTTP 404: model 'qwen2.5' not found",
    ],
)
def test_redact_leaves_prose_and_plain_urls_alone(text: str) -> None:
    assert redact(text) == text


def test_given_secrets_are_redacted_whatever_their_shape_and_short_placeholders_are_not() -> None:
    text = f"key {GATEWAY_KEY} refused; none of it was billed; try ollama"
    redacted = redact(text, [GATEWAY_KEY, "none", "ollama"])
    assert redacted == "key [redacted] refused; none of it was billed; try [redacted]"
    # (6 characters are looked for; a 4-character placeholder key is no secret)
    assert redact("p%40ss-w0rd-x in the log", ["p@ss-w0rd-x"]) == "[redacted] in the log"


def test_the_secrets_a_client_was_configured_with() -> None:
    client = openai.OpenAI(
        base_url="http://alice:pw-in-url-1@127.0.0.1:9/v1?sig=query-sig-123",
        api_key=GATEWAY_KEY,
        default_headers={
            "Authorization": "Bearer header-token-1",
            "api-key": "azure-key-123",
            "X-Api-Key": "anthropic-key-1",
            "X-Trace": "trace-id-not-secret",
        },
        default_query={"api-version": "2024-02-01", "key": "query-key-123"},
    )
    with client:
        found = set(client_secrets(client))
    assert {
        GATEWAY_KEY,
        "pw-in-url-1",
        "query-sig-123",
        "Bearer header-token-1",
        "header-token-1",
        "azure-key-123",
        "anthropic-key-1",
        "query-key-123",
    } <= found
    assert "trace-id-not-secret" not in found
    assert "2024-02-01" not in found
    assert "alice" not in found  # a user name next to a password is not looked for alone


# --- redact: properties ------------------------------------------------------------------------

_TOKEN = string.ascii_letters + string.digits
tokens = st.text(alphabet=_TOKEN, min_size=20, max_size=40)
passwords = st.text(alphabet=_TOKEN + "-._~!$&'()*+,;=%", min_size=6, max_size=30)
odd_keys = st.text(alphabet=_TOKEN + "-_.:", min_size=6, max_size=30)
# Text around a credential: anything, and the fragments a credential's patterns are made of
# (so a neighbour that looks like a name, a scheme or a placeholder is tried too).
FRAGMENTS = [
    "api_key", "password", "Authorization", "token", "Bearer ", "Basic ", "sk-", "eyJ",
    "http://", "@", ":", "=", "'", '"', "?", "&", "/", " ", "[redacted]", "[redacted key]",
]  # fmt: skip
surrounding = st.lists(st.text(max_size=8) | st.sampled_from(FRAGMENTS), max_size=10).map("".join)


def _shapes() -> st.SearchStrategy[tuple[str, str]]:
    """A credential in one of the shapes `redact` knows, and the secret part of it."""
    return st.one_of(
        tokens.map(lambda t: (f"sk-proj-{t}", t)),
        tokens.map(lambda t: (f"sk-ant-api03-{t}", t)),
        tokens.map(lambda t: (f"gsk_{t}", t)),
        tokens.map(lambda t: (f"Bearer {t}", t)),
        tokens.map(lambda t: (f"Authorization: {t}", t)),
        tokens.map(lambda t: (f"api_key={t}", t)),
        tokens.map(lambda t: (f'{{"x-api-key": "{t}"}}', t)),
        tokens.map(lambda t: (f"password: {t}", t)),
        passwords.map(lambda p: (f"https://bob:{p}@api.example/v1/chat", p)),
        passwords.map(lambda p: (f"postgres://{p}@db.example:5432/x", p)),
    )


@settings(max_examples=300, deadline=None)
@given(before=surrounding, planted=_shapes(), after=surrounding)
@example(before="api_key:", planted=("password: 0123456789abcdef0123", "0123456789ab"), after="")
@example(before="Authorization:", planted=("token: 0123456789abcdef", "0123456789ab"), after="")
def test_a_planted_credential_is_removed_from_any_text_and_redacting_twice_changes_nothing(
    before: str, planted: tuple[str, str], after: str
) -> None:
    credential, secret = planted
    assume(secret not in f"{before} {after}")  # only the planted one is known to be a secret
    text = f"{before} {credential} {after}"
    redacted = redact(text)
    assert secret not in redacted
    assert redact(redacted) == redacted


@settings(max_examples=300, deadline=None)
@given(before=surrounding, key=odd_keys, after=surrounding)
def test_a_given_secret_is_removed_from_any_text_and_redacting_twice_changes_nothing(
    before: str, key: str, after: str
) -> None:
    assume(key not in "[redacted key]")  # a "secret" inside the placeholder is not looked for
    text = f"{before}{key}{after}"  # glued to whatever is around it
    redacted = redact(text, [key])
    assert key not in redacted
    assert redact(redacted, [key]) == redacted


@settings(max_examples=300, deadline=None)
@given(text=surrounding)
def test_redact_is_idempotent_on_any_text(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


# --- judges over HTTP: an endpoint that echoes the key -----------------------------------------


MakeJudgeModel = Callable[..., JudgeModel]


@pytest.fixture
async def make_jm(kind: str, server: ScriptedOpenAI) -> AsyncIterator[MakeJudgeModel]:
    """`JudgeModel`s on the kind's client, with the client options given; closed after."""
    clients: list[Any] = []

    def make(**options: Any) -> JudgeModel:
        options.setdefault("api_key", GATEWAY_KEY)
        client = server.client(**options) if kind == "sync" else server.async_client(**options)
        clients.append(client)
        return JudgeModel(client, JUDGE)

    yield make
    await close_clients(clients)


async def evaluate(kind: str, judge: Any) -> Any:
    if kind == "sync":
        return judge.evaluate(REQUEST)
    return await judge.aevaluate(REQUEST)


def assert_clean(error: BaseException, *secrets: str) -> None:
    texts = [str(error), repr(error), *map(str, error.args)]
    for secret in secrets:
        for text in texts:
            assert secret not in text


JUDGE_KINDS = {"relevancy": judges.relevancy, "rating": judges.rating}  # plain and instructor


@pytest.mark.parametrize("judge_kind", JUDGE_KINDS)
@pytest.mark.parametrize(
    ("body", "secret"),
    [
        (f"Incorrect API key provided: {GATEWAY_KEY}.", GATEWAY_KEY),
        (f"Incorrect API key provided: {PROJECT_KEY}.", PROJECT_KEY),
        (f"header was Authorization: Bearer {BEARER_TOKEN}", BEARER_TOKEN),
    ],
)
async def test_a_401_echoing_the_key_raises_without_it(
    server: ScriptedOpenAI,
    make_jm: MakeJudgeModel,
    kind: str,
    judge_kind: str,
    body: str,
    secret: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.script(JUDGE, [Reply.error(401, body)])
    judge = JUDGE_KINDS[judge_kind](make_jm())
    with pytest.raises(JudgeMisconfigured) as caught, caplog.at_level(logging.DEBUG):
        await evaluate(kind, judge)
    assert_clean(caught.value, secret, GATEWAY_KEY)
    # nor in what the libraries under the request log (instructor logs the error at ERROR)
    assert caplog.records
    for record in caplog.records:
        assert secret not in record.getMessage(), record.name
    message = str(caught.value)
    assert message.startswith(f"judge model 'judge' at {server.base_url}/: HTTP 401: ")
    assert "[redacted" in message
    assert message.endswith("(check the API key)")


@pytest.mark.parametrize(
    ("options", "secret"),
    [
        ({"default_headers": {"api-key": "azure-key-abc123"}}, "azure-key-abc123"),
        ({"default_headers": {"x-api-key": "anthropic-abc123"}}, "anthropic-abc123"),
        ({"default_headers": {"Authorization": "Bearer gateway-t0k"}}, "gateway-t0k"),
        ({"base_url_password": "pw-in-url-123"}, "pw-in-url-123"),
    ],
)
async def test_a_key_from_the_headers_or_the_base_url_is_redacted_too(
    server: ScriptedOpenAI,
    make_jm: MakeJudgeModel,
    kind: str,
    options: dict[str, Any],
    secret: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    options = dict(options)  # the parameter's dict is shared by the sync and the async run
    password = options.pop("base_url_password", None)
    if password is not None:
        options["base_url"] = server.base_url.replace("http://", f"http://alice:{password}@")
    server.script(JUDGE, [Reply.error(403, f"credential {secret} may not use this model")])
    with pytest.raises(JudgeMisconfigured) as caught, caplog.at_level(logging.DEBUG):
        await evaluate(kind, judges.relevancy(make_jm(**options)))
    assert_clean(caught.value, secret)
    for record in caplog.records:  # httpx and openai log the URL, user info and all
        assert secret not in record.getMessage(), record.name
    assert "HTTP 403: credential [redacted] may not use this model" in str(caught.value)


@pytest.mark.parametrize("status", [503, 429])
async def test_an_outage_echoing_the_key_is_unavailable_without_it_everywhere(
    server: ScriptedOpenAI,
    make_jm: MakeJudgeModel,
    kind: str,
    status: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    echo = Reply.error(status, f"key {GATEWAY_KEY} over quota; Bearer {BEARER_TOKEN}")
    secrets = (GATEWAY_KEY, BEARER_TOKEN)
    jm = make_jm()

    # raised to the caller
    server.script(JUDGE, [echo])
    with pytest.raises(JudgeUnavailable) as caught:
        await evaluate(kind, judges.relevancy(jm))
    assert caught.value.status_code == status
    assert_clean(caught.value, *secrets)

    # the judge's own fail_open: an unjudged verdict whose reason quotes the error
    server.script(JUDGE, [echo])
    verdict = await evaluate(kind, judges.relevancy(jm, judge_error_policy="fail_open"))
    assert verdict.status == "unjudged"
    assert f"HTTP {status}" in (verdict.reason or "")
    for secret in secrets:
        assert secret not in (verdict.reason or "")

    # the decorators' events and log lines: unjudged (fail open), exhausted, blocked
    events: list[Event] = []
    server.script(JUDGE, [echo] * 3)
    _, respond = answering(kind)
    open_fn = retry_on_low_quality(evaluator=judges.relevancy(jm))(respond)
    closed_fn = retry_on_low_quality(
        evaluator=judges.relevancy(jm), judge_error_policy="fail_closed"
    )(respond)
    screened_fn = guarded(screen=judges.relevancy(jm), refusal="Sorry.")(respond)
    with refinekit.subscribe(events.append), caplog.at_level(logging.DEBUG, "refinekit"):
        assert await acall(open_fn, "q") == "an answer"
        with pytest.raises(JudgeUnavailable) as closed:
            await acall(closed_fn, "q")
        assert await acall(screened_fn, "q") == "Sorry."
    assert_clean(closed.value, *secrets)
    kinds = {e.kind for e in events}
    assert {"unjudged", "blocked"} <= kinds
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("unjudged" in r.getMessage() for r in warnings)
    assert any("blocked" in r.getMessage() for r in warnings)
    for secret in secrets:
        for record in caplog.records:
            assert secret not in record.getMessage()
        for event in events:
            texts = [event.error, event.feedback, event.detail]
            if event.verdict is not None:
                texts += [event.verdict.reason, event.verdict.feedback]
            assert all(secret not in (t or "") for t in texts), event


async def test_log_lines_redact_what_an_events_text_quotes(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Feedback is the user's own text, kept in the event; the log line redacts it."""
    feedback = f"upstream refused Authorization: Bearer {BEARER_TOKEN} for {PROJECT_KEY}"
    if kind == "sync":

        def respond(question: str) -> str:
            raise LowQualityAnswer(feedback)

    else:

        async def respond(question: str) -> str:  # type: ignore[misc]
            raise LowQualityAnswer(feedback)

    events: list[Event] = []
    fn = retry_on_low_quality(max_retries=1)(respond)
    with (
        refinekit.subscribe(events.append),
        caplog.at_level(logging.DEBUG, "refinekit"),
        pytest.raises(LowQualityAnswer),
    ):
        await acall(fn, "q")
    assert [e.kind for e in events if e.kind in ("retry", "exhausted")] == ["retry", "exhausted"]
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert any("Bearer [redacted]" in m and "[redacted key]" in m for m in logged)
    for message in logged:
        assert BEARER_TOKEN not in message
        assert PROJECT_KEY not in message


def test_a_hooks_error_is_warned_about_without_the_credential_it_quotes() -> None:
    def broken_hook(event: Event) -> None:
        raise RuntimeError(f"could not post with api_key={GATEWAY_KEY}")

    fn = retry_on_low_quality(max_retries=1)(lambda q: "fine")
    with refinekit.subscribe(broken_hook), pytest.warns(RefinekitWarning) as warned:
        assert fn("q") == "fine"
    messages = [str(w.message) for w in warned]
    assert any("api_key=[redacted]" in m for m in messages)
    assert all(GATEWAY_KEY not in m for m in messages)


# --- the clients' own secrets, literally, wherever refinekit redacts -------------------------

UNSHAPED_KEY = "not-a-key-shape-123"  # the judge client's key, in no known key shape
HEADER_SECRET = "hdr-value-no-shape-456"  # a credential header of the judge client


class QuotingCache:
    """A backend whose errors quote the judge client's own key and header (as a proxy or a
    driver that echoes what it was handed may)."""

    def get(self, key: str) -> str | None:
        raise RuntimeError(f"cache proxy refused {UNSHAPED_KEY} (header {HEADER_SECRET})")

    def set(self, key: str, value: str) -> None:
        raise RuntimeError(f"cache proxy refused {UNSHAPED_KEY} on write")


async def test_a_cache_backends_error_quoting_the_clients_key_reaches_no_log_event_or_verdict(
    kind: str, server: ScriptedOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(JUDGE, ["Yes"])
    options = {"api_key": UNSHAPED_KEY, "default_headers": {"X-Gateway-Token": HEADER_SECRET}}
    client = server.client(**options) if kind == "sync" else server.async_client(**options)
    events: list[Event] = []
    try:
        judge = judges.relevancy(JudgeModel(client, JUDGE, cache=QuotingCache()))
        with refinekit.subscribe(events.append), caplog.at_level(logging.DEBUG):
            verdict = await evaluate(kind, judge)
    finally:
        closed = client.close()
        if asyncio.iscoroutine(closed):
            await closed
    assert verdict.passed  # a failing backend never fails the judgement
    logged = [r.getMessage() for r in caplog.records]
    assert any(
        "judge cache QuotingCache: get failed; asking the model as without a cache: "
        "RuntimeError: cache proxy refused [redacted] (header [redacted])" in m
        for m in logged
    )
    assert any("judge cache QuotingCache: set failed" in m for m in logged)
    texts = [*logged, *map(repr, events), repr(verdict)]
    for text in texts:
        assert UNSHAPED_KEY not in text
        assert HEADER_SECRET not in text
    assert (client.api_key, client._custom_headers["X-Gateway-Token"]) == (
        UNSHAPED_KEY,
        HEADER_SECRET,
    )  # the caller's client is left as it was


def test_a_hooks_error_quoting_a_judge_clients_key_is_warned_about_without_it() -> None:
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key=UNSHAPED_KEY)
    judge_model = JudgeModel(client, JUDGE)  # in play: its client's key is known

    def broken_hook(event: Event) -> None:
        raise RuntimeError(f"the collector refused {UNSHAPED_KEY}")

    fn = retry_on_low_quality(max_retries=1)(lambda q: "fine")
    with refinekit.subscribe(broken_hook), pytest.warns(RefinekitWarning) as warned:
        assert fn("q") == "fine"
    messages = [str(w.message) for w in warned]
    assert any("the collector refused [redacted]" in m for m in messages)
    assert all(UNSHAPED_KEY not in m for m in messages)
    del judge_model
    client.close()


def test_a_clients_secrets_are_redacted_while_its_judge_model_lives_and_released_after() -> None:
    key = "lives-with-its-model-789"
    client = openai.OpenAI(
        base_url="http://127.0.0.1:9/v1", api_key=key, default_headers={"api-key": key + "-h"}
    )
    settings = (client.api_key, dict(client._custom_headers), str(client.base_url))
    first, second = JudgeModel(client, JUDGE), JudgeModel(client, "other")
    assert redact(f"echo {key} and {key}-h") == "echo [redacted] and [redacted]"
    del first
    gc.collect()
    assert redact(f"echo {key}") == "echo [redacted]"  # the other model still holds it
    del second
    gc.collect()
    assert key not in registered_secrets()
    assert redact(f"echo {key}") == f"echo {key}"  # nothing outlives its models
    # many models made and dropped: nothing is kept of them
    held = len(registered_secrets())
    for n in range(500):  # (a copy of the client sharing its HTTP pool, with another key)
        JudgeModel(client.with_options(api_key=f"short-lived-{n:04}"), JUDGE)
    gc.collect()
    assert len(registered_secrets()) == held
    assert (client.api_key, dict(client._custom_headers), str(client.base_url)) == settings
    client.close()


def test_an_owner_collected_while_secrets_are_registered_does_not_deadlock() -> None:
    # The garbage collector runs finalizers on whichever thread allocates, so an owner's
    # release can run inside another registration, with the registry busy (the full suite
    # once hung so, in PostgresCache's constructor). Played here deterministically: the
    # owner is dropped while the registry's lock is held, in a thread the test can give up on.
    import threading

    from refinekit._core import redact as _redact

    class Owner:
        pass

    def register_then_drop() -> None:
        owner = Owner()
        _redact.register_secrets(owner, ["released-inside-a-busy-registry"])
        with _redact._registry._lock:
            del owner  # its finalizer runs now, on this thread, with the lock held
            gc.collect()

    worker = threading.Thread(target=register_then_drop, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "the release deadlocked on the registry's lock"
    assert "released-inside-a-busy-registry" not in registered_secrets()
    assert redact("released-inside-a-busy-registry") == "released-inside-a-busy-registry"


UNSHAPED_TARGET = f"""
def answer(question):
    raise RuntimeError("the gateway refused {UNSHAPED_KEY}")
"""

UNSHAPED_JUDGE = """
import os
import openai
from refinekit import judges
from refinekit.judges import Criterion, JudgeModel

client = openai.OpenAI(base_url=os.environ["RK_BASE_URL"], api_key="{key}", max_retries=0)
judge = judges.criteria(JudgeModel(client, "judge"), [Criterion("correct", "Right?")])
""".replace("{key}", UNSHAPED_KEY)


def test_eval_keeps_the_judge_clients_unshaped_key_out_of_store_report_and_terminal(
    ws: Workspace, scripted_openai: ScriptedOpenAI, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RK_BASE_URL", scripted_openai.base_url)
    golden = ws.csv("golden.csv", [{"question": "Refunds?"}])
    report = ws.path / "report.html"

    result = cli(
        "eval", golden, "--target", f"{ws.module(UNSHAPED_TARGET)}:answer",
        "--judge", f"{ws.module(UNSHAPED_JUDGE)}:judge", "--report", report,
    )  # fmt: skip

    assert result.code == 4, result.err  # no answer judged: the setup failed
    assert "RuntimeError: the gateway refused [redacted]" in result.out
    stored = b"".join(p.read_bytes() for p in (ws.path / ".refinekit").iterdir())
    html = report.read_text(encoding="utf-8")
    assert "the gateway refused [redacted]" in html
    for text in (result.out, result.err, html):
        assert UNSHAPED_KEY not in text
    assert UNSHAPED_KEY.encode() not in stored


# --- refinekit eval: nothing stored, printed or reported --------------------------------------


LEAKY_TARGET = f"""
import os
import openai
from refinekit import LowQualityAnswer

def answer(question):
    if question == "Broken?":
        raise RuntimeError(
            "500 Server Error for url: http://bob:{PASSWORD}@api.example/v1/chat"
        )
    if question == "Rejected?":
        raise LowQualityAnswer("upstream said: Authorization: Bearer {BEARER_TOKEN}")
    client = openai.OpenAI(base_url=os.environ["RK_BASE_URL"], api_key="sk-test", max_retries=0)
    with client:
        reply = client.chat.completions.create(
            model="answer", messages=[{{"role": "user", "content": question}}]
        )
    return reply.choices[0].message.content
"""

KEYED_JUDGE = f"""
import os
import openai
from refinekit import judges
from refinekit.judges import Criterion, JudgeModel

client = openai.OpenAI(
    base_url=os.environ["RK_BASE_URL"],
    api_key="{GATEWAY_KEY}",
    max_retries=0,
    default_headers={{"Connection": "close"}},
)
judge = judges.criteria(
    JudgeModel(client, "judge"), [Criterion("correct", "Right?")], judge_error_policy="fail_open"
)
"""


def test_eval_keeps_a_urls_password_and_the_judges_key_out_of_store_report_and_terminal(
    ws: Workspace, scripted_openai: ScriptedOpenAI, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RK_BASE_URL", scripted_openai.base_url)
    golden = ws.csv("golden.csv", [{"question": q} for q in ("Broken?", "Rejected?", "Down?")])
    target = ws.module(LEAKY_TARGET)
    judge = ws.module(KEYED_JUDGE)
    scripted_openai.script("answer", [answers({"Down?": "late"})])
    outage = Reply.error(503, f"overloaded; the key {GATEWAY_KEY} is fine")
    scripted_openai.script("judge", [judge_replies({"late": [outage]})])
    report = ws.path / "report.html"

    result = cli(
        "eval", golden, "--target", f"{target}:answer", "--judge", f"{judge}:judge",
        "--concurrency", "1", "--report", report,
    )  # fmt: skip

    assert result.code == 0, result.err  # no gate was given
    assert table(result.out) == {1: "RAISED", 2: "RAISED", 3: "unavail"}
    # what was wrong is still said, with the credential replaced
    shown = "RuntimeError: 500 Server Error for url: http://[redacted]@api.example/v1/chat"
    assert shown in result.out
    html = report.read_text(encoding="utf-8")
    # the failing-cases list at the top, the case's details and the all-cases table
    assert html.count(shown) == 3
    assert "HTTP 503: overloaded; the key [redacted] is fine" in html
    assert "Bearer [redacted]" in html
    stored = b"".join(p.read_bytes() for p in (ws.path / ".refinekit").iterdir())
    assert b"http://[redacted]@api.example/v1/chat" in stored
    for secret in (PASSWORD, GATEWAY_KEY, BEARER_TOKEN):
        assert secret not in result.out
        assert secret not in result.err
        assert secret not in html
        assert secret.encode() not in stored


def test_eval_stops_on_a_401_that_echoes_the_key_and_says_so_without_it(
    ws: Workspace, scripted_openai: ScriptedOpenAI, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RK_BASE_URL", scripted_openai.base_url)
    golden = ws.csv("golden.csv", [{"question": "Down?"}])
    target = ws.module(LEAKY_TARGET)
    judge = ws.module(KEYED_JUDGE)
    scripted_openai.script("answer", [answers({"Down?": "late"})])
    revoked = Reply.error(401, f"Incorrect API key provided: {GATEWAY_KEY}.")
    scripted_openai.script("judge", [judge_replies({"late": [revoked]})])

    result = cli("eval", golden, "--target", f"{target}:answer", "--judge", f"{judge}:judge")

    assert result.code == 3
    assert re.search(r"HTTP 401: Incorrect API key provided: \[redacted\]\. \(check", result.err)
    assert GATEWAY_KEY not in result.out + result.err
    for path in (ws.path / ".refinekit").iterdir():
        assert GATEWAY_KEY.encode() not in path.read_bytes()


# --- every carrier of outgoing text redacts what it is made with -----------------------------

_A_KEY = "sk-proj-Zq8v3LmN0pXr7TtY2wQe5RbU9sKd4HfG"


def test_an_event_a_reset_and_every_refinekit_error_are_redacted_when_made() -> None:
    from refinekit import JsonParseError, MissingPrice, Reset, Usage
    from refinekit._core.errors import StreamInterrupted

    said = f"the server said: Incorrect API key provided: {_A_KEY}"
    event = Event(
        "correction", "self_correct", "f", "job", 1, 2, False, Usage(),
        feedback=said, error=said, detail=said, aborted=said,
    )  # fmt: skip
    assert _A_KEY not in repr(event)
    assert event.error is not None
    assert "[redacted key]" in event.error
    assert Reset("correction", 1, said).reason == redact(said)
    errors: list[Exception] = [
        JsonParseError(said, raw_reply="", errors=[], conversation=[], corrections_used=1),
        MissingPrice(said, model="m"),
        StreamInterrupted(said),
        JudgeUnavailable(said, model="m"),
        refinekit.RefinekitError(said),
    ]
    for error in errors:
        assert _A_KEY not in str(error), type(error).__name__
        assert _A_KEY not in repr(error), type(error).__name__
        assert "[redacted key]" in str(error)
