"""The parsed arguments of `refinekit eval` and `refinekit calibrate` as the run's options."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from ..eval import RunOptions

__all__ = ["options_of"]

OptionsT = TypeVar("OptionsT", bound=RunOptions)


def options_of(kind: type[OptionsT], args: Any, **given: Any) -> OptionsT:
    """The options object of `kind` from the parsed `args`: each field its argument's value.

    The parser's destinations are the options' field names (`--fresh` is `resume=False`,
    `--address` is `ray_address`, `--run` is `run_id`), so an option is added once, as a
    field, plus its line in the parser; `given` are the values no argument holds
    (`on_event`). An argument the command does not have keeps the field's default.
    """
    values = {
        field.name: getattr(args, field.name)
        for field in dataclasses.fields(kind)
        if hasattr(args, field.name)
    }
    return kind(**(values | given))
