"""Reading a reply's fields whatever its form: an SDK object's attributes or a dict's keys."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._core.types import Usage

__all__ = ["call_usage", "get", "tokens"]


_MAPPINGS: dict[type, bool] = {}
"""Whether a type is a `Mapping`, by type: `get` reads every field of every streamed chunk, and
an abstract class's `isinstance` costs more than the read itself."""


def get(obj: Any, name: str) -> Any:
    """`obj[name]` for a mapping, else `obj.name`; None when it has no such field."""
    mapping = _MAPPINGS.get(type(obj))
    if mapping is None:
        mapping = isinstance(obj, Mapping)
        if len(_MAPPINGS) < 256:  # a program's chunk and reply types are few
            _MAPPINGS[type(obj)] = mapping
    if mapping:
        return obj.get(name)
    return getattr(obj, name, None)


def tokens(usage: Any, *names: str) -> int:
    """The sum of the named integer fields of a usage block (a missing one counts 0)."""
    total = 0
    for name in names:
        value = get(usage, name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            total += value
    return total


def call_usage(block: Any, prompt: Sequence[str], completion: str) -> Usage:
    """One model call's usage, read from its usage block (None: a call that counts no tokens).

    Its prompt tokens are the sum of the `prompt` fields, its completion tokens the
    `completion` field.
    """
    if block is None:
        return Usage(model_calls=1)
    return Usage(
        model_calls=1,
        prompt_tokens=tokens(block, *prompt),
        completion_tokens=tokens(block, completion),
    )
