"""The `refinekit` command line."""

from ._parser import main

__all__ = ["main"]
