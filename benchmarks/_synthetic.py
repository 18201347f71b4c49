"""The benchmark's synthetic data: `refinekit/cli/_demo/_synthetic/`, which the local demo
(`refinekit demo --local`) draws its batch from too. Re-exported here for the benchmarks."""

from refinekit.cli._demo._synthetic import (
    CitationItem,
    Invoice,
    InvoiceItem,
    JudgingItem,
    citation_items,
    invoices,
    judging_items,
)

__all__ = [
    "CitationItem",
    "Invoice",
    "InvoiceItem",
    "JudgingItem",
    "citation_items",
    "invoices",
    "judging_items",
]
