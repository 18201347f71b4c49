"""Credentials out of text: what refinekit raises, logs, prints, stores or reports.

`redact` replaces, in any text:

- the secrets it is given literally (a judge's configured API key, whatever its shape, and
  the URL-encoded form of each), when at least `MIN_SECRET_CHARS` long;
- the user info of a URL, `scheme://user:password@host` -> `scheme://[redacted]@host` (the
  scheme, host and path stay, so the message still says which endpoint failed);
- an `Authorization` (or `Proxy-Authorization`) value, and `Bearer ...` / `Basic ...`
  credentials anywhere;
- assignments of keys, tokens, passwords and secrets (`api_key=...`, `x-api-key: ...`,
  `{"password": "..."}`, `OPENAI_API_KEY=...`), and query parameters named like them;
- provider key shapes (`sk-...`, `sk-proj-...`, `sk-ant-...`, `gsk_...`, `hf_...`,
  `xai-...`, `pplx-...`, `r8_...`, `ghp_...`, `github_pat_...`, `AIza...`, `AKIA...`) and
  JSON Web Tokens.

`client_secrets` collects what an `openai` client was configured with, for `redact` to
replace literally; `register_secrets` makes `redact` replace such secrets everywhere (every
log line, exception, event, span, stored run and report) while the object that holds them
lives (a `JudgeModel`, a reviser, a PostgreSQL store or cache); `safe_url` gives an endpoint
as a message may show it, and `url_problem` says what makes a connection URL malformed, both
without parsing its user info into the text; `redacted_logs` redacts what the libraries under
a judge's request (instructor, openai, httpx) log while it is under way. This module imports
nothing of refinekit's own.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any
from urllib.parse import parse_qsl, quote, unquote

__all__ = [
    "MIN_SECRET_CHARS",
    "REDACTED",
    "client_secrets",
    "redact",
    "redact_fields",
    "redacted_str",
    "redacted_logs",
    "register_secrets",
    "registered_secrets",
    "safe_url",
    "url_problem",
    "url_secrets",
]

REDACTED = "[redacted]"
_REDACTED_KEY = "[redacted key]"

MIN_SECRET_CHARS = 6
"""Literal secrets shorter than this are not looked for: a placeholder key such as `none` or
`EMPTY` (local servers) is no secret, and replacing every `none` would garble messages."""

# Names of keys, tokens and passwords, in assignments, headers and query parameters.
_SECRET_NAME = (
    r"(?:[A-Za-z0-9]+[_-]){0,4}"  # a prefix: OPENAI_API_KEY, x-api-key, db_password, x-goog-...
    r"(?:api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key|subscription[_-]?key"
    r"|(?:access|refresh|id|auth|session|bearer)[_-]?token|token"
    r"|password|passwd|pwd|secret|client[_-]?secret|credentials?)"
)
# A value that is itself the next name (`api_key: password: ...`) is not the credential: the
# assignment after it is redacted instead.
_NOT_A_NAME = rf"(?!(?:{_SECRET_NAME}|(?:proxy-)?authorization)['\"]?[=:](?:\s|['\"]|$))"
_HEADER_NAME = re.compile(r"(?i)(authorization|api[_-]?key|token|secret|password|cookie)")
_QUERY_NAME = re.compile(
    r"(?i)(key|token|secret|password|passwd|pwd|sig|signature|auth|credential|code)"
)

_Replace = str | Callable[[re.Match[str]], str]


def _credential_like(token: str) -> bool:
    """Whether a word after `Bearer`/`Basic` looks like a credential, not like prose.

    A digit, a symbol of a token (`.~+/=-_`) or a capital after the first letter: real
    credentials have one ("dXNlcjpwYXNz", "eyJ...", "my-key-123"); "Basic information" not.
    """
    return bool(re.search(r"[0-9._~+/=\-]", token) or re.search(r"[A-Z]", token[1:]))


def _scheme_credential(match: re.Match[str]) -> str:
    if not _credential_like(match.group(3)):
        return match.group(0)
    return f"{match.group(1)}{match.group(2)}{REDACTED}"


def _header_value(match: re.Match[str]) -> str:
    return f"{match.group(1)}{match.group(2)}{match.group(3) or ''}{REDACTED}"


_PATTERNS: list[tuple[re.Pattern[str], _Replace]] = [
    # user info of a URL: the whole of it (a user name is often a token itself, as in
    # https://<token>@host, or https://apikey:<key>@host); the scheme, host and path stay
    (re.compile(r"(?i)\b([a-z][a-z0-9+.\-]{0,30}://)[^\s/?#]+@"), rf"\1{REDACTED}@"),
    # an Authorization header's value, with or without its scheme
    (
        re.compile(
            r"(?i)\b((?:proxy-)?authorization)(['\"]?\s*[=:]\s*['\"]?)"
            rf"((?:bearer|basic|digest|token|apikey)\s+)?{_NOT_A_NAME}[^\s'\",;}}&]+"
        ),
        _header_value,
    ),
    # Bearer and Basic credentials anywhere else
    (re.compile(r"(?i)\b(bearer|basic)(\s+)([A-Za-z0-9._~+/=\-]{8,})"), _scheme_credential),
    # assignments of keys, tokens, passwords (also quoted, as in a dict's repr or JSON)
    (
        re.compile(
            rf"(?i)\b({_SECRET_NAME})(['\"]?\s*[=:]\s*['\"]?)(?!\[redacted){_NOT_A_NAME}"
            r"[^\s'\",;}&]{4,}"
        ),
        rf"\1\2{REDACTED}",
    ),
    # query parameters named like a key, a token or a signature: ?key=..., &sig=...
    (
        re.compile(
            r"(?i)([?&][A-Za-z0-9_.\-]{0,40}?(?:key|token|secret|password|passwd|pwd|sig|signature"
            r"|auth|credential|code)[A-Za-z0-9_.\-]{0,40}=)(?!\[redacted)[^&\s#'\"]+"
        ),
        rf"\1{REDACTED}",
    ),
    # provider key shapes (a masked one, sk-proj-****abcd, too)
    (
        re.compile(
            r"\b(?:sk-|gsk_|hf_|xai-|pplx-|r8_|gh[pousr]_|github_pat_|glpat-|xox[abprs]-)"
            r"[A-Za-z0-9*][A-Za-z0-9_*\-]{15,}"
        ),
        _REDACTED_KEY,
    ),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}|\bAKIA[0-9A-Z]{16}\b"), _REDACTED_KEY),
    # JSON Web Tokens: header.payload.signature, base64url, the header starting {"
    (
        re.compile(r"(?<![\w-])eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"),
        _REDACTED_KEY,
    ),
]


def _literals(secrets: Iterable[str]) -> list[str]:
    found: list[str] = []
    for secret in secrets:
        for form in (secret, quote(secret, safe=""), unquote(secret)):
            # a secret inside a placeholder could never be removed for good: leave it
            if len(form) >= MIN_SECRET_CHARS and form not in REDACTED + _REDACTED_KEY:
                found.append(form)
    # longest first, so a secret that contains another is replaced whole
    return sorted(set(found), key=len, reverse=True)


def _once(text: str, literals: list[str]) -> str:
    for secret in literals:
        text = text.replace(secret, REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every credential in it replaced by `[redacted]` (a key: `[redacted key]`).

    The secrets registered with `register_secrets` (those of the clients and stores in play)
    are replaced too, wherever this runs.

    Args:
        text: Any text: an error message, a reason, feedback, a log line.
        secrets: Secrets to replace wherever they appear, whatever their shape (a configured
            API key, a password); those shorter than `MIN_SECRET_CHARS` are ignored.

    Returns:
        The text without credentials. Redacting it again changes nothing.
    """
    given = list(secrets)
    literals = _registry.literals()
    if given:
        literals = sorted(set(literals).union(_literals(given)), key=len, reverse=True)
    for _ in range(4):  # a replacement may complete another's match: until nothing changes
        redacted = _once(text, literals)
        if redacted == text:
            break
        text = redacted
    return text


def redact_fields(obj: object, names: Iterable[str]) -> None:
    """Redact the text attributes `names` of `obj` in place (a frozen dataclass's too).

    What the carriers of outgoing text call when they are made (an event, a `Reset`), so that
    no code path can build one that holds a credential.
    """
    for name in names:
        value = getattr(obj, name, None)
        if isinstance(value, str) and value:
            cleaned = redact(value)
            if cleaned != value:
                object.__setattr__(obj, name, cleaned)


def redacted_str(method: Callable[[Any], str]) -> Callable[[Any], str]:
    """`method` (an exception's `__str__`) with what it returns redacted."""
    if getattr(method, "_redacted", False):
        return method

    def __str__(self: Any) -> str:
        return redact(method(self))

    __str__._redacted = True  # type: ignore[attr-defined]
    __str__.__doc__ = method.__doc__
    return __str__


# --- the secrets of the clients in play --------------------------------------------------------


class _Registry:
    """Secrets `redact` replaces everywhere, each held by the live objects that registered it.

    A count per secret (two judge models may share a key); an owner's secrets are released
    when it is garbage-collected (a `weakref.finalize`), so nothing outlives its owner and
    the owner itself is never kept alive or changed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._literals: list[str] = []
        # Released owners' secrets, waiting to be taken out. A finalizer runs whenever the
        # garbage collector does, on whichever thread, even inside `add` while it holds the
        # lock: it only appends here (atomic), and never takes the lock itself.
        self._released: collections.deque[tuple[str, ...]] = collections.deque()

    def add(self, owner: object, secrets: Iterable[str]) -> None:
        found = tuple(
            dict.fromkeys(s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_CHARS)
        )
        if not found:
            return
        with self._lock:
            for secret in found:
                self._counts[secret] = self._counts.get(secret, 0) + 1
            self._settle()
        weakref.finalize(owner, self._released.append, found)

    def _settle(self) -> None:
        """Take released secrets out and recompute the literals (with the lock held)."""
        while True:
            while self._released:
                for secret in self._released.popleft():
                    left = self._counts.get(secret, 0) - 1
                    if left > 0:
                        self._counts[secret] = left
                    else:
                        self._counts.pop(secret, None)
            literals = _literals(self._counts)
            if not self._released:  # a collection during `_literals` may have released more
                self._literals = literals
                return

    def literals(self) -> list[str]:
        if self._released:
            with self._lock:
                self._settle()
        return self._literals  # replaced whole on each change, never changed in place

    def secrets(self) -> tuple[str, ...]:
        with self._lock:
            self._settle()
            return tuple(self._counts)


_registry = _Registry()


def register_secrets(owner: object, secrets: Iterable[str]) -> None:
    """Make `redact` replace `secrets` (literally, whatever their shape) while `owner` lives.

    What a `JudgeModel` does with its client's key, base URL credentials and credential
    headers, and a PostgreSQL store or cache with its URL's password: any text refinekit
    logs, raises, emits, traces, stores or reports is then without them, whichever code path
    made it. Nothing is read from or written to `owner`; its secrets are released when it is
    garbage-collected. Secrets shorter than `MIN_SECRET_CHARS` are ignored.

    Args:
        owner: The object whose lifetime the secrets share (weak-referenceable).
        secrets: The literal secrets.
    """
    _registry.add(owner, secrets)


def registered_secrets() -> tuple[str, ...]:
    """The secrets registered by live owners (for tests and debugging)."""
    return _registry.secrets()


# --- URLs ------------------------------------------------------------------------------------

ENCODE_HINT = (
    "a user name or password holding '@', '/', '?', '#' or '%' must be percent-encoded "
    "('@' as %40, '/' as %2F, '?' as %3F, '#' as %23, '%' as %25), as libpq and SQLAlchemy "
    "require: urllib.parse.quote(password, safe='') gives it"
)


def _authority_end(rest: str) -> int:
    """Where the host part of a URL's text after `scheme://` ends: its first `/`, `?` or `#`."""
    found = [i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0]
    return min(found) if found else len(rest)


def _parts(url: str) -> tuple[str, str | None, str, str]:
    """`(scheme, user info, host part, the rest)` of a URL, read so that no secret leaks.

    The user info ends at the URL's *last* `@`, also when that `@` comes after a `/`, `?` or
    `#` (a password holding one of those, not percent-encoded, would else be read as a port,
    a path or a fragment, and shown). No `://`: no scheme, and the whole text as the rest.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "", None, "", url
    at = rest.rfind("@")
    end = _authority_end(rest)
    userinfo: str | None = None
    if at >= end:  # an '@' past the host part: the user info runs to it
        userinfo, rest = rest[:at], rest[at + 1 :]
        end = _authority_end(rest)
    elif "@" in rest[:end]:
        userinfo, _, host = rest[:end].rpartition("@")
        rest = host + rest[end:]
        end = len(host)
    return scheme, userinfo, rest[:end], rest[end:]


def url_secrets(url: str) -> list[str]:
    """The credentials a URL carries: its user info and query values named like keys.

    Read as `safe_url` reads the URL (the user info up to its last `@`), and as libpq reads
    it (up to the first), so that a malformed URL's password is known too.
    """
    _, userinfo, _, rest = _parts(url)
    found: list[str] = []
    if userinfo:
        user, colon, password = userinfo.partition(":")
        found.append(password if colon else user)  # https://<token>@host: the user is the key
        if "@" in userinfo:  # as libpq reads user:password@host, to the first '@'
            first = userinfo.partition("@")[0]
            found.append(first.partition(":")[2] or first)
        found.append(userinfo)
    query = rest.partition("?")[2].partition("#")[0]
    for name, value in parse_qsl(query, keep_blank_values=False):
        if _QUERY_NAME.search(name):
            found += [value, value.rstrip("/")]
    return [s for s in dict.fromkeys(found) if s]


def safe_url(url: str) -> str:
    """A URL without user info and query (and no key-shaped path part): for messages and logs.

    Never raises, and never shows any part of the user info, also of a malformed URL (its
    user info read up to the last `@`): what `url_problem` says is wrong is told apart.
    """
    scheme, _, host, rest = _parts(url)
    path = re.split(r"[?#]", rest, maxsplit=1)[0]
    if not scheme:
        return redact(path)
    return redact(f"{scheme}://{host.lower()}{path}")


def _host_problem(host: str) -> str | None:
    """What is wrong with one `host[:port]` of a URL, or None."""
    port = ""
    if host.startswith("["):
        close = host.find("]")
        if close < 0:
            return "an IPv6 address's '[' is never closed (write [::1]:5432)"
        after = host[close + 1 :]
        if after and not after.startswith(":"):
            return "after an IPv6 address's ']' only ':port' may follow"
        name, port = host[: close + 1], after[1:]
    else:
        if "[" in host or "]" in host:
            return "a '[' or ']' outside an IPv6 address (write [::1]:5432)"
        if host.count(":") > 1:
            return "a host with more than one ':' (an IPv6 address goes in brackets: [::1]:5432)"
        name, _, port = host.partition(":")
    if port and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        return f"the port of host {name or 'localhost'!r} is not a number from 1 to 65535"
    return None


def url_problem(url: str) -> str | None:
    """What makes `url` a malformed connection URL (a database's), or None when it is sound.

    In words that quote no part of its user info. Checked: no `#` (a database URL has no
    fragment), no `@` after the host part and none in the user info (where libpq and URL
    parsers would read the password differently: each must be percent-encoded), `%` only as
    a percent-encoding, and each host (libpq takes several, comma-separated) a name or a
    bracketed IPv6 address with an optional port from 1 to 65535.

    Args:
        url: The URL as given, credentials and all.
    """
    _, sep, rest = url.partition("://")
    if not sep:
        return "it is not a URL (no '://' after its scheme)"
    if "#" in rest:
        return f"it holds a '#' (a database URL has no fragment); {ENCODE_HINT}"
    end = _authority_end(rest)
    if "@" in rest[end:]:
        return (
            f"it holds an '@' after its host part; {ENCODE_HINT} (an '@' in the database "
            "name or a query value too)"
        )
    if rest[:end].count("@") > 1:
        return f"its user info holds an '@'; {ENCODE_HINT}"
    if re.search(r"%(?![0-9A-Fa-f]{2})", rest):
        return "it holds a '%' that is not followed by two hex digits (write '%' as %25)"
    for host in rest[:end].rpartition("@")[2].split(","):
        problem = _host_problem(host)
        if problem is not None:
            return problem
    return None


def client_secrets(client: Any) -> tuple[str, ...]:
    """The secrets an `openai` client (`AzureOpenAI` too) or `anthropic` one was configured with.

    Its API key (an Anthropic client's `auth_token` too), the user info and key-like query
    values of its base URL, the values of headers named like credentials (`Authorization`,
    `api-key`, `x-api-key`, ...) in its `default_headers`, and key-like values of its
    `default_query`.
    """
    found: list[str] = []
    for attribute in ("api_key", "_azure_ad_token", "auth_token"):
        value = getattr(client, attribute, None)
        if isinstance(value, str):
            found.append(value)
    base_url = getattr(client, "base_url", None)
    if base_url is not None:
        found += url_secrets(str(base_url))
    headers = getattr(client, "_custom_headers", None)
    if isinstance(headers, Mapping):
        for name, value in headers.items():
            if isinstance(name, str) and isinstance(value, str) and _HEADER_NAME.search(name):
                found.append(value)
                scheme, _, credential = value.strip().partition(" ")
                if credential and scheme.isalpha():  # "Bearer <token>": the token alone too
                    found.append(credential.strip())
    query = getattr(client, "_custom_query", None)
    if isinstance(query, Mapping):
        for name, value in query.items():
            if isinstance(name, str) and _QUERY_NAME.search(name) and value is not None:
                found.append(str(value))
    return tuple(dict.fromkeys(s for s in found if len(s) >= MIN_SECRET_CHARS))


# --- the logs of the libraries a judge's request goes through ----------------------------------

LIBRARY_LOGGERS = ("instructor", "openai", "httpx")
"""The libraries whose log records `redacted_logs` redacts (every logger of each): instructor
logs an endpoint's error text at ERROR before it raises, which may echo the key; openai and
httpx log the request URL, user info and all, at DEBUG and INFO."""

_SCOPE: ContextVar[tuple[str, ...] | None] = ContextVar("refinekit_redacted_logs", default=None)
_COVERED: set[str] = set()
_COVER_LOCK = threading.Lock()
_seen_loggers = -1


class _ScopedRedaction(logging.Filter):
    """Redacts a record logged inside `redacted_logs` (in its thread or task); else nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = _SCOPE.get()
        if secrets is not None:
            try:
                text = record.getMessage()
            except Exception:  # a record that cannot be formatted is the logger's business
                return True
            record.msg = redact(text, secrets)
            record.args = None
        return True


_FILTER = _ScopedRedaction()


def _cover(prefixes: tuple[str, ...]) -> None:
    """Put the filter on every logger of the libraries (a logger made since, on the next call)."""
    global _seen_loggers
    known = logging.root.manager.loggerDict
    if len(known) == _seen_loggers:
        return
    with _COVER_LOCK:
        names = [n for n in list(known) if n.split(".")[0].startswith(prefixes)]
        for name in (*prefixes, *names):
            if name not in _COVERED:
                logging.getLogger(name).addFilter(_FILTER)
                _COVERED.add(name)
        _seen_loggers = len(known)


@contextlib.contextmanager
def redacted_logs(secrets: Iterable[str] = ()) -> Iterator[None]:
    """Redact what instructor, openai and httpx log within the block (its thread or task).

    `secrets` are redacted literally too. Their records logged elsewhere are left as they are.
    """
    _cover(LIBRARY_LOGGERS)
    token = _SCOPE.set(tuple(secrets))
    try:
        yield
    finally:
        _SCOPE.reset(token)
