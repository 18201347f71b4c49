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

import re
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import refinekit.eval
from refinekit._redact import safe_url, url_problem
from refinekit.eval import StoreURL, UsageProblem
from refinekit.judges import PostgresCache

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
