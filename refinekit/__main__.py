"""`python -m refinekit` is the `refinekit` command."""

from ._cli import main

raise SystemExit(main())
