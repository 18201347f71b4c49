"""Deterministic synthetic data for `benchmarks/bench_local_quality.py` and `demo --local`.

Three sets, each generated from a seed with `random.Random(seed)` only (no other source of
randomness, no clock, no environment), so the same seed gives the same items, byte for byte,
on every machine and Python version the project supports:

- `invoices(n, seed)`: short invoice texts in varied phrasings, each with its ground truth, an
  `Invoice` (number, vendor, currency, total).
- `judging_items(n, seed)`: question, context and answer, with a pass/fail label and the kind
  of mistake a failing answer makes (a changed number, the figure of another place, a dropped
  condition, a flipped yes/no). Exactly half pass (the odd item out fails).
- `citation_items(n, seed)`: a question and one short source document with a source id
  (`policies/warranty-3.md`) and the fact that answers it (`10 months`), for answers that must
  cite their source and state the fact.
"""

from ._citations import CitationItem, citation_items
from ._invoices import Invoice, InvoiceItem, invoices
from ._judging import JudgingItem, judging_items

__all__ = [
    "CitationItem",
    "Invoice",
    "InvoiceItem",
    "JudgingItem",
    "citation_items",
    "invoices",
    "judging_items",
]
