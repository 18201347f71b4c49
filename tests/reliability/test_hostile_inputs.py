"""Hostile input that is not a model reply: store URLs, deeply nested JSON, a judge cache's rows.

- A run store or judge cache URL whose password holds what a URL reserves (`#`, `/`, `?`,
  `@`, `%`) is refused as malformed, or is sound: no part of the password is ever in the
  message, the URL as shown, or a connection error's text (issue 20, item 1).
- JSON nested 200,000 levels deep, wherever refinekit reads JSON it did not write (a golden
  file, a price file, a stored run, a judge cache's row, a model's or a judge's reply, a
  body that is no completion), is the documented typed error, never a `RecursionError`;
  JSON nested moderately deep still works (issue 20, item 4).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from helpers import Cli, Workspace
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import refinekit.eval
from refinekit import (
    AnswerRejected,
    ContextDocument,
    EvaluationRequest,
    JsonParseError,
    JudgeReplyError,
    JudgeUnavailable,
    checks,
    evidence,
    judges,
    reviewed,
    self_correct,
)
from refinekit._core.redact import safe_url, url_problem
from refinekit.eval import RunStoreError, StoreURL, UsageProblem
from refinekit.eval._store._sqlite import SQLiteStore
from refinekit.judges import PostgresCache, SQLiteCache
from refinekit.testing import Reply, ScriptedOpenAI, set_testing

# --- a password holding what a URL reserves --------------------------------------------------

# pieces of letters no message's words are made of (three of them in a row never occur in
# refinekit's text), between the characters a URL reserves
pieces = st.text(alphabet="ZQWXKVJ", min_size=3, max_size=8)
separators = st.sampled_from(["#", "/", "?", "@", "%", ":", "%2", "#/", "?@"])
passwords = st.builds(
    lambda first, rest: first + "".join(s + p for s, p in rest),
    pieces,
    st.lists(st.tuples(separators, pieces), min_size=1, max_size=4),
)
hosts = st.sampled_from(["127.0.0.1:9", "db.internal:5432", "[::1]:9", "127.0.0.1:9,h2:9"])


def _pieces_of(password: str) -> list[str]:
    for reserved in "#/?@%:":
        password = password.replace(reserved, " ")
    return [p for p in password.split() if len(p) >= 3]


@settings(max_examples=300, deadline=None)
@given(password=passwords, host=hosts, database=st.sampled_from(["evals", "x", ""]))
def test_no_part_of_a_password_is_shown_whatever_it_holds(
    password: str, host: str, database: str
) -> None:
    url = f"postgresql://ci:{password}@{host}/{database}"
    shown: list[str] = [safe_url(url), url_problem(url) or ""]
    if url_problem(url) is not None:  # refused as malformed, and said so
        refused = r"is not a valid PostgreSQL URL \(user info not shown\): "
        with pytest.raises(UsageProblem, match=refused) as e:
            refinekit.eval.store_location(url)
        shown.append(str(e.value))
    else:
        where = refinekit.eval.store_location(url)
        assert isinstance(where, StoreURL)
        shown += [str(where), repr(where), f"{where}"]
    # percent-encoded, as libpq requires, the same password is always a sound URL
    encoded = f"postgresql://ci:{quote(password, safe='')}@{host}/{database}"
    assert url_problem(encoded) is None
    assert str(refinekit.eval.store_location(encoded)) == f"postgresql://{host}/{database}"
    shown.append(safe_url(encoded))
    for text in shown:
        for piece in _pieces_of(password):
            assert piece not in text, (url, text)


@pytest.mark.parametrize(
    "password", ["Hunter#2pw", "Hunter/2pw", "Hunter?2pw", "Hunter@2pw", "Hunter%2pw"]
)
def test_a_judge_cache_url_with_such_a_password_shows_none_of_it(password: str) -> None:
    with pytest.raises(ValueError, match=r"^PostgresCache: postgresql://.* is not a valid URL: "):
        PostgresCache(f"postgresql://u:{password}@127.0.0.1:9/x")
    # sound, but nothing listens on port 9: libpq's own error, without the password
    said = re.escape("cannot use postgresql://127.0.0.1:9/x")
    with pytest.raises(ValueError, match=said) as refused:
        PostgresCache(f"postgresql://u:{quote(password, safe='')}@127.0.0.1:9/x")
    assert "Hunter" not in str(refused.value)
    assert quote(password, safe="") not in str(refused.value)


# --- JSON nested 200,000 levels deep, and moderately deep -------------------------------------

DEEP = 200_000
MODERATE = 150  # under the 200 levels refinekit reads, over what any real file holds


def nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


def jsonl(ws: Workspace, name: str, *lines: str) -> Path:
    path = ws.path / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("command", ["eval", "calibrate"])
def test_a_data_file_row_nested_200000_deep_is_a_usage_error_naming_the_file_and_line(
    ws: Workspace, cli: Cli, command: str
) -> None:
    module = ws.module("def answer(question):\n    return 'ok'\n\njudge = lambda r: True\n")
    ok = '{"question": "q", "answer": "ok", "label": "pass", "must_mention": "ok"}'
    data = jsonl(ws, "golden.jsonl", ok, '{"question": "deep", "meta": ' + nested(DEEP) + "}")
    option = (
        ("--target", f"{module}:answer") if command == "eval" else ("--judge", f"{module}:judge")
    )

    result = cli(command, data, *option)

    assert result.code == 2
    assert result.err == (
        f"refinekit {command}: error: {data}, line 2: a value nested more than 200 levels deep "
        "(refinekit reads JSON up to that depth); flatten it\n"
    )
    with pytest.raises(UsageProblem, match=r"line 2: a value nested more than"):
        refinekit.eval.run(data, target=f"{module}:answer")


def test_a_moderately_deep_row_is_run_stored_listed_and_reported(ws: Workspace, cli: Cli) -> None:
    module = ws.module("def answer(question, meta):\n    return 'ok'\n")
    data = jsonl(
        ws,
        "golden.jsonl",
        '{"question": "q", "must_mention": "ok", "meta": ' + nested(MODERATE) + "}",
    )

    ran = cli("eval", data, "--target", f"{module}:answer", "--report", "r.html")
    listed = cli("runs")
    again = cli("eval", data, "--target", f"{module}:answer")  # complete: read back, not re-run

    assert ran.code == 0, ran.err
    assert listed.code == 0, listed.err
    assert again.code == 0, again.err
    [case] = refinekit.eval.run(data, target=f"{module}:answer").cases
    assert json.dumps(case.row["meta"]) == nested(MODERATE)
    assert (ws.path / "r.html").is_file()


def test_a_price_file_nested_200000_deep_is_a_usage_error(ws: Workspace, cli: Cli) -> None:
    module = ws.module("def answer(question):\n    return 'ok'\n")
    data = jsonl(ws, "golden.jsonl", '{"question": "q", "must_mention": "ok"}')
    prices = ws.path / "prices.json"
    prices.write_text('{"m": ' + nested(DEEP, "0") + "}", encoding="utf-8")

    result = cli("eval", data, "--target", f"{module}:answer", "--prices", prices)

    assert result.code == 2
    assert result.err.startswith(
        f"refinekit eval: error: --prices {prices}: not JSON (JSON nested more than 200 levels "
        "deep); write {"
    )


def test_a_stored_row_nested_200000_deep_is_a_store_error(ws: Workspace, cli: Cli) -> None:
    module = ws.module("def answer(question):\n    return 'ok'\n")
    data = jsonl(ws, "golden.jsonl", '{"question": "q", "must_mention": "ok"}')
    assert cli("eval", data, "--target", f"{module}:answer").code == 0
    db = ws.path / ".refinekit" / "runs.db"
    with contextlib.closing(sqlite3.connect(db)) as store, store:
        store.execute("UPDATE cases SET row = ?", ('{"meta": ' + nested(DEEP) + "}",))
        store.execute("UPDATE runs SET status = 'incomplete'")  # so that it is resumed

    resumed = cli("eval", data, "--target", f"{module}:answer")

    assert resumed.code == 2
    assert resumed.err == (
        "refinekit eval: error: the run store holds a row it cannot read (run 1, case 1: nested "
        "too deeply to read); it was not written by refinekit as it is: restore the store, or "
        "give another --db\n"
    )
    with SQLiteStore(db) as opened, pytest.raises(RunStoreError, match="holds a row it cannot"):
        opened.cases(1)


def test_a_judge_cache_entry_nested_200000_deep_is_a_miss_replaced(
    scripted_openai: ScriptedOpenAI, tmp_path: Path
) -> None:
    scripted_openai.script("judge", ["Yes", "Yes"])
    request = EvaluationRequest(question="Refunds?", answer="Within seven days.")
    with scripted_openai.client() as client, SQLiteCache(tmp_path / "c.db") as cache:
        judge = judges.relevancy(judges.JudgeModel(client, "judge", cache=cache))
        assert judge.evaluate(request).passed
        cache._db.execute("UPDATE refinekit_judge_cache SET value = ?", (nested(DEEP),))
        assert judge.evaluate(request).passed  # asked again
        assert judge.evaluate(request).passed  # the fresh reply replaced the entry
        assert (cache.hits, cache.misses) == (1, 2)
    assert len(scripted_openai.requests) == 2


class Nest(BaseModel):
    child: Nest | None = None


def depth_of(node: Nest | None) -> int:
    depth = 0
    while node is not None:
        node, depth = node.child, depth + 1
    return depth


def nested_object(depth: int) -> str:
    return '{"child": ' * depth + "null" + "}" * depth


@pytest.mark.parametrize(
    ("reply", "mode"),
    [
        (nested(DEEP), "sync"),
        (nested(DEEP), "async"),
        ("```json\n" + nested(DEEP) + "\n```", "sync"),
        ("[" * DEEP, "async"),
    ],
    ids=["plain-sync", "plain-async", "fenced-sync", "unclosed-async"],
)
def test_a_reply_nested_200000_deep_is_a_correction_then_a_json_parse_error(
    scripted_openai: ScriptedOpenAI, mode: str, reply: str
) -> None:
    scripted_openai.script("m", [reply, reply])
    messages = [{"role": "user", "content": "The tree, please."}]
    with set_testing():
        if mode == "sync":
            with scripted_openai.client() as client:

                @self_correct(schema=Nest, max_corrections=1)
                def extract(messages: list[dict[str, Any]]) -> Any:
                    return client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]

                with pytest.raises(JsonParseError, match="the JSON is nested too deeply") as info:
                    extract(messages)
        else:

            async def main() -> None:
                async with scripted_openai.async_client() as client:

                    @self_correct(schema=Nest, max_corrections=1)
                    async def extract(messages: list[dict[str, Any]]) -> Any:
                        return await client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]

                    await extract(messages)

            with pytest.raises(JsonParseError, match="the JSON is nested too deeply") as info:
                asyncio.run(main())
    assert (len(info.value.replies), info.value.corrections_used) == (2, 1)
    corrections = [r.body for r in scripted_openai.requests[1:]]
    assert all("nested too deeply" in json.dumps(body) for body in corrections)


def test_a_moderately_deep_reply_is_read(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.script("m", [nested_object(MODERATE)])
    with scripted_openai.client() as client:

        @self_correct(schema=Nest, max_corrections=2)
        def extract(messages: list[dict[str, Any]]) -> Any:
            return client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]

        tree = extract([{"role": "user", "content": "The tree, please."}])
    assert depth_of(tree) == MODERATE


@pytest.mark.parametrize("name", ["relevancy", "rating", "criteria"])
@pytest.mark.parametrize(
    "reply", [nested(DEEP), "```json\n" + nested(DEEP) + "\n```"], ids=["plain", "fenced"]
)
def test_a_judge_reply_nested_200000_deep_is_a_judge_reply_error(
    scripted_openai: ScriptedOpenAI, name: str, reply: str
) -> None:
    scripted_openai.script("judge", [reply] * 3)
    request = EvaluationRequest(question="Refunds?", answer="Within seven days.")
    with scripted_openai.client() as client:
        model = judges.JudgeModel(client, "judge")
        judge = {
            "relevancy": lambda: judges.relevancy(model),
            "rating": lambda: judges.rating(model, max_retries=1),
            "criteria": lambda: judges.criteria(model, [judges.Criterion("kept", "Kept?")]),
        }[name]()
        with pytest.raises(JudgeReplyError):
            judge.evaluate(request)


def test_an_answer_nested_200000_deep_fails_values_supported_not_a_crash() -> None:
    context = (ContextDocument("Total: 1 EUR"),)
    deep = EvaluationRequest(question="Total?", answer=nested(DEEP), context=context)
    verdict = checks.values_supported().evaluate(deep)
    assert not verdict.passed
    assert "nested at most 200 levels deep" in verdict.feedback
    with pytest.raises(ValueError, match="nested more than 200 levels deep"):
        evidence.stated_values(deep)
    moderate = deep.model_copy(update={"answer": nested(MODERATE)})
    assert checks.values_supported().evaluate(moderate).passed  # its 1 is the document's
    invented = deep.model_copy(update={"answer": nested(MODERATE, "2")})
    assert not checks.values_supported().evaluate(invented).passed


@pytest.mark.parametrize("who", ["judge", "reviser"])
def test_a_response_body_nested_200000_deep_is_a_failed_call_not_a_crash(
    scripted_openai: ScriptedOpenAI, who: str
) -> None:
    body = nested(DEEP)
    request = EvaluationRequest(question="Refunds?", answer="Within seven days.")
    with scripted_openai.client() as client:
        if who == "judge":
            scripted_openai.script("judge", [Reply.raw(body)])
            with pytest.raises(JudgeUnavailable, match="the reply was not a chat completion"):
                judges.relevancy(judges.JudgeModel(client, "judge")).evaluate(request)
            return
        scripted_openai.script("answer", ["Refunds: always."])
        scripted_openai.script("judge", ["No"])
        scripted_openai.script("reviser", [Reply.raw(body)])

        @reviewed(
            judge=judges.relevancy(judges.JudgeModel(client, "judge")),
            client=client,
            model="reviser",
            max_revisions=1,
        )
        def answer(question: str) -> Any:
            return client.chat.completions.create(
                model="answer", messages=[{"role": "user", "content": question}]
            )

        with pytest.raises(AnswerRejected) as info:
            answer("Can I get a refund?")
    assert info.value.reason == "reviser_error"
