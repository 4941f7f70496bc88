"""The tenant's audit trail (issue 27 §5): an append-only, hash-chained record of privileged
actions, written in the transaction of the action it records."""
