"""The judge cache: a judge model's replies stored by a key made of exactly what was asked.

A judge turns an `EvaluationRequest` into one or more model requests (flow commands:
`Complete`, `Structured`). With a cache on its `JudgeModel`, each request is wrapped in a
`Cached` command: its key is a SHA-256 over the judge's kind, the endpoint, the provider, the
request's keyword arguments as sent (model, messages, sampling parameters, response format,
logprobs...; not the time limit), for a structured reply its schema, instructor mode and
retries, and the salt of `cache_salt`. What is stored is what the call returned (the
completion, or the parsed reply), as JSON text, and only once the judge could read it: a hit
gives the judge exactly what the call would have, and the judge's own reading (its thresholds,
`strict`, `uncertain`...) makes the verdict from it as it would from a fresh reply. A stored
value the judge cannot read (not JSON, not a completion, or a reply it reads no verdict from)
is a miss: the model is asked, and its reply replaces the value once the judge could read it.

A hit makes no request and adds nothing to the job's `judge_usage`. Backends are small: a
`get` and a `set` of JSON text by key (`JudgeCache`); the built-in ones (`MemoryCache`,
`SQLiteCache`, `PostgresCache`) are `_cache_backends`'.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from .._core.jsonload import loads
from .._core.redact import redact
from .._core.types import Usage
from .._engine.events import Event, emit, wants_debug_events
from .._engine.job import current_job
from ._cache_backends import Counters, JudgeCache, MemoryCache
from ._calls import Structured

if TYPE_CHECKING:
    from ._calls import Complete, Structured
    from ._client import JudgeModel

__all__ = [
    "Cached",
    "cache_of",
    "cache_salt",
    "cached",
    "completion_type",
    "use_cache",
]

logger = logging.getLogger("refinekit")

KEY_VERSION = 1
"""Part of every key: a change in what is stored (or how) makes new keys, never a misread."""


# --- the salt --------------------------------------------------------------------------------

_SALT: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "refinekit_judge_cache_salt", default=()
)


@contextlib.contextmanager
def cache_salt(salt: str) -> Iterator[None]:
    """Key the judge requests made inside the block apart from the same requests outside it.

    Use it to judge the same thing several times on purpose, e.g. the k-th repeat of an eval
    under `cache_salt(f"repeat={k}")`: each repeat gets (and stores) its own replies, so a
    cache never hides a judge's variability. Salts nest: inside two blocks, both are in the
    key. A context variable: it follows the code into threads and tasks started from it by
    refinekit, and asyncio tasks created inside the block.

    Args:
        salt: Any text; only its value matters.
    """
    if not isinstance(salt, str):
        raise TypeError(f"cache_salt takes a str, got {type(salt).__name__}")
    token = _SALT.set((*_SALT.get(), salt))
    try:
        yield
    finally:
        _SALT.reset(token)


# --- the key and the command -----------------------------------------------------------------

Accept = Callable[[Any], object]
"""Reads a reply as the judge will, raising when the judge could not: then it is not stored."""


_FALLBACK: contextvars.ContextVar[JudgeCache | None] = contextvars.ContextVar(
    "refinekit_judge_cache_fallback", default=None
)


@contextlib.contextmanager
def use_cache(cache: JudgeCache) -> Iterator[None]:
    """Inside the block, judge models without a cache of their own use `cache`.

    What `refinekit eval --cache` does around the run's judge (its cache is in the run store):
    a judge built on a `JudgeModel(...)` made without `cache=` looks its requests up in `cache`,
    under the same rules (temperature 0, unless the model has `cache_sampled=True`). A model
    with its own cache keeps it. A context variable: it follows the code into threads and tasks
    started from the block by refinekit, and asyncio tasks created inside it.

    Args:
        cache: The backend (`MemoryCache`, `SQLiteCache`, or any `JudgeCache`).

    Raises:
        TypeError: `cache` has no `get` and `set`.
    """
    if not isinstance(cache, JudgeCache):
        raise TypeError(
            f"use_cache takes a judge cache (get and set of str), got {type(cache).__name__}"
        )
    token = _FALLBACK.set(cache)
    try:
        yield
    finally:
        _FALLBACK.reset(token)


def cache_of(judge: JudgeModel) -> JudgeCache | None:
    """The cache `judge`'s requests are looked up in: its own, else `use_cache`'s, else None."""
    return judge.cache if judge.cache is not None else _FALLBACK.get()


def cacheable(judge: JudgeModel) -> bool:
    """Whether `judge`'s replies may be cached: a cache, and temperature 0 or `cache_sampled`."""
    if cache_of(judge) is None:
        return False
    return judge.cache_sampled or judge.temperature == 0


def request_key(
    judge: JudgeModel, kind: str, kwargs: dict[str, Any], structured: dict[str, Any] | None
) -> str:
    """The SHA-256 key of one judge request (see the module's docstring).

    Never holds a credential: the client's key and headers are not part of it, and the
    endpoint is its base URL without credentials or query.
    """
    parts = {
        "refinekit_judge_cache": KEY_VERSION,
        "judge": kind,
        "provider": judge.provider,
        "endpoint": judge.where,
        "request": {k: v for k, v in kwargs.items() if k != "timeout"},
        "structured": structured,
        "salt": list(_SALT.get()),
    }
    text = json.dumps(
        to_jsonable_python(parts, fallback=repr),
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def cached(
    kind: str, command: Complete | Structured, accept: Accept | None = None
) -> Complete | Structured | Cached:
    """`command`, looked up in its judge model's cache first when that model has one.

    Args:
        kind: The judge's kind ("relevancy", "criteria", ...): part of the key.
        command: The request to make on a miss.
        accept: For a completion, the judge's reading of it; a reply it raises on is not
            stored. A structured reply was validated by instructor: it is always stored.
    """
    if not cacheable(command.judge):
        return command
    return Cached(kind, command, accept)


class Cached:
    """A flow command: a judge request answered from the cache, or made and then stored."""

    __slots__ = ("accept", "cache", "command", "judge", "key", "kind", "stored_type")
    role = "cached"  # see `refinekit._engine.flow.Command`

    def __init__(self, kind: str, command: Complete | Structured, accept: Accept | None) -> None:
        judge = command.judge
        cache = cache_of(judge)
        assert cache is not None
        self.kind = kind
        self.command: Any = command  # a `Complete` or `Structured`, maybe as an instrument runs it
        self.accept = accept
        self.judge = judge
        self.cache: JudgeCache = cache
        structured = None
        if isinstance(command, Structured):
            structured = {
                "schema": command.response_model.model_json_schema(),
                "mode": command.mode,
                "max_retries": command.max_retries,
            }
            self.stored_type = command.response_model
        else:
            self.stored_type = completion_type(judge)
        self.key = request_key(judge, kind, command.kwargs, structured)

    def map_commands(self, change: Callable[[Any], Any]) -> Cached:
        """The same lookup, with the same key, making `change(command)` on a miss."""
        copy = object.__new__(Cached)
        for name in self.__slots__:
            setattr(copy, name, getattr(self, name))
        copy.command = change(self.command)
        return copy

    # -- what is stored ------------------------------------------------------------------

    def _encode(self, result: Any) -> str | None:
        """The JSON text to store for `result`, or None when the judge could not read it."""
        if self.accept is not None:
            try:
                self.accept(result)
            except Exception:  # the judge raises it itself: a failure is never stored
                return None
        if not isinstance(result, BaseModel):
            return None
        return json.dumps(
            {"v": KEY_VERSION, "value": result.model_dump(mode="json")},
            ensure_ascii=False,
            separators=(",", ":"),
        )

    def _decode(self, text: str | None) -> Any:
        """What a stored value stands for (a completion, a parsed reply), or None.

        A value that cannot be read back, or a reply the judge cannot read (a completion
        saying "Maybe" to a yes/no judge, stored by another version or edited by hand), is
        dropped: None, a miss, so the model is asked and its readable reply replaces it. A
        bad entry costs one call, not one on every later run.
        """
        if text is None:
            return None
        try:
            if not isinstance(text, str):
                raise TypeError(f"the backend returned {type(text).__name__}, not str")
            found = self.stored_type.model_validate(loads(text)["value"])
        except Exception as exc:
            self._drop("could not read the stored reply; asking the model", exc)
            return None
        if self.accept is not None:
            try:
                self.accept(found)
            except Exception as exc:  # the judge would raise it on every later run
                self._drop("the stored reply gives no verdict; asking the model", exc)
                return None
        return found

    def _drop(self, what: str, exc: Exception) -> None:
        _warn(self.cache, what, exc)
        if isinstance(self.cache, Counters):
            self.cache._unreadable()

    # -- running -------------------------------------------------------------------------

    def run_sync(self) -> Any:
        found = self._decode(_safely(self.cache, "get", self.cache.get, self.key))
        self._observe(found is not None)
        if found is not None:
            return found
        result = self.command.run_sync()
        value = self._encode(result)
        if value is not None:
            _safely(self.cache, "set", self.cache.set, self.key, value)
        return result

    async def run_async(self) -> Any:
        found = self._decode(await self._call("get", self.cache.get, self.key))
        self._observe(found is not None)
        if found is not None:
            return found
        result = await self.command.run_async()
        value = self._encode(result)
        if value is not None:
            await self._call("set", self.cache.set, self.key, value)
        return result

    async def _call(self, what: str, method: Callable[..., Any], *args: Any) -> Any:
        if isinstance(self.cache, MemoryCache):  # in-process, a lock held for microseconds
            return _safely(self.cache, what, method, *args)
        return await asyncio.to_thread(_safely, self.cache, what, method, *args)

    def _observe(self, hit: bool) -> None:
        """Emit the `judge_cache` event (when anyone listens)."""
        if not wants_debug_events():
            return
        job = current_job()
        emit(
            Event(
                kind="judge_cache",
                decorator="judge",
                function=self.kind,
                job_id=job.id if job is not None else "",
                attempt=0,
                max_attempts=0,
                is_last=False,
                usage=job.usage if job is not None else Usage(),
                judge_usage=job.judge_usage if job is not None else Usage(),
                cache="hit" if hit else "miss",
                detail=self.key,
            )
        )


def completion_type(judge: JudgeModel) -> type[BaseModel]:
    """What a judge model's direct chat request returns: a `ChatCompletion` or a `Message`.

    `anthropic` is imported only for an Anthropic judge: refinekit does not depend on it.
    """
    if judge.provider == "anthropic":
        from anthropic.types import Message

        return Message
    from openai.types.chat import ChatCompletion

    return ChatCompletion


def _safely(cache: Any, what: str, method: Callable[..., Any], *args: Any) -> Any:
    """Call a backend's `get` or `set`; a failure is logged and counts as "nothing there"."""
    try:
        return method(*args)
    except Exception as exc:
        _warn(cache, f"{what} failed; asking the model as without a cache", exc)
        return None


def _warn(cache: Any, what: str, exc: Exception) -> None:
    logger.warning(
        "judge cache %s: %s: %s: %s",
        type(cache).__name__,
        what,
        type(exc).__name__,
        redact(str(exc)),
    )
