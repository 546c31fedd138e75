"""Archiving sealed logs and summaries exactly once (zstd, a ledger), to a directory or an
fsspec URL, within a local disk budget."""
