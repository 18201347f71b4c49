"""The run store: its interface and records, the SQL base, claims, SQLite and PostgreSQL."""
