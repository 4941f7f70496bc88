"""Celery application and thin tasks."""
