"""Database plumbing shared by every domain package."""
