"""The per-dataset privacy budget account and its append-only ledger."""
