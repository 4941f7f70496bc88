"""Uploaded tables, their declared schemas and their encoded storage."""
