"""Console sign-in sessions: a random token in a cookie, mapped server-side to an API key."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, utcnow


class ConsoleSession(Base):
    """One signed-in browser. Only a SHA-256 of the cookie's token is stored, so a leaked table
    holds no usable session; the key's revocation (``api_keys.revoked_at``) ends it, since every
    request resolves the session through the key."""

    __tablename__ = "console_sessions"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("api_keys.id"), index=True)
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
