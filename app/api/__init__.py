"""Cross-cutting HTTP pieces: dependency aliases, middleware, shared response types."""
