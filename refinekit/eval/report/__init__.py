"""Self-contained HTML reports of stored runs."""
