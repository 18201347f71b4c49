"""The base: the data model, every exception, configuration, and small shared helpers.

Package metadata, redaction and error text, schema checks, bounded JSON reading, number
checks and the tracing's names. Imports nothing of refinekit outside this package.
"""
