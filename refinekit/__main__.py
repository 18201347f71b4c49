"""`python -m refinekit` is the `refinekit` command."""

from .cli import main

raise SystemExit(main())
