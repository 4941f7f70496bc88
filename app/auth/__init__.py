"""API keys, tenants and roles."""
