"""Registered sources (issue 29 §1): datasets read where they live instead of uploaded."""
