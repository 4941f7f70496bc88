"""API key format and hashing. Keys are random; only HMAC-SHA256(secret, key) is stored."""

from __future__ import annotations

import hashlib
import hmac
import secrets

KEY_PREFIX = "rhs_"
DISPLAY_PREFIX_LENGTH = 12


def generate_key() -> str:
    """A new API key: a fixed prefix (for secret scanners) and 256 random bits."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(secret: bytes, key: str) -> str:
    return hmac.new(secret, key.encode(), hashlib.sha256).hexdigest()


def display_prefix(key: str) -> str:
    return key[:DISPLAY_PREFIX_LENGTH]
