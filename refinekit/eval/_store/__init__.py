"""The run store: its interface and records, the SQL base, claims, SQLite and PostgreSQL.

`_records` is what every store is (the `RunStore` protocol) and keeps (`RunInfo`,
`CaseRecord`); `_sqlbase` the database's hooks and schema steps, `_claims` the workers and
their claims, `_sql` every query, written once; `_sqlite` and `_postgres` the two stores;
`_open` (above them all) which store a `db` argument names, and opening it.
"""

from ._open import STORE_FORMS, open_store, store_location, store_path
from ._records import CappedClaim, CaseOutcome, CaseRecord, RunInfo, RunStore, StoreURL

__all__ = [
    "STORE_FORMS",
    "CappedClaim",
    "CaseRecord",
    "CaseOutcome",
    "RunInfo",
    "RunStore",
    "StoreURL",
    "open_store",
    "store_location",
    "store_path",
]
