"""Console sessions and request-forgery checks.

A session is a random 256-bit token in an HttpOnly, SameSite=Strict cookie (Secure over https);
the database keeps only its SHA-256, the API key it belongs to, a per-session CSRF token and an
expiry. Every request resolves the token to the key through ``api_keys`` and refuses a revoked key,
so revoking a key ends its console sessions at their next request; signing out deletes the row.

Why a table rather than a signed cookie: a signed cookie cannot be ended by signing out (a copy
stays valid until it expires), while a row can be deleted; the key lookup on every request is
needed either way to honour revocation.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.auth import repository as auth_repository
from app.auth.models import ApiKey
from app.auth.service import Principal, authenticate, principal_of
from app.console.models import ConsoleSession
from app.db.base import utcnow

COOKIE = "rhosynth_console"
# The sign-in form's token lives in its own cookie (double submit): a page on another site can
# neither read it nor, with SameSite=Strict, make the browser send it, so it cannot sign a
# victim's browser in to the attacker's key (login CSRF).
LOGIN_COOKIE = "rhosynth_login"
LOGIN_FORM_LIFETIME = timedelta(hours=1)
SESSION_LIFETIME = timedelta(hours=8)
CSRF_FIELD = "csrf"


@dataclass(frozen=True)
class SignedIn:
    """A resolved console session: who is calling and the CSRF token its forms carry."""

    principal: Principal
    csrf_token: str


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def sign_in(session: Session, secret: bytes, presented_key: str) -> tuple[str, SignedIn] | None:
    """A new session for a usable key: (cookie token, session), or None. Admin keys sign in
    too; the pages then check the role as the API's routes do (admin keys see the key, webhook
    and audit pages only). Flushes."""
    principal = authenticate(session, secret, presented_key.strip())
    if principal is None:
        return None
    now = utcnow()
    # Expired sessions of this key are removed as it signs in again; nothing else accumulates.
    session.execute(
        delete(ConsoleSession).where(
            ConsoleSession.key_id == principal.key_id, ConsoleSession.expires_at <= now
        )
    )
    token = secrets.token_urlsafe(32)
    csrf = secrets.token_urlsafe(32)
    session.add(
        ConsoleSession(
            token_hash=_hash(token),
            key_id=principal.key_id,
            csrf_token=csrf,
            created_at=now,
            expires_at=now + SESSION_LIFETIME,
        )
    )
    session.flush()
    return token, SignedIn(principal, csrf)


def resolve(session: Session, token: str | None) -> SignedIn | None:
    """The live session of a cookie token: unexpired, and its key usable (not revoked, expired
    or retired); else None."""
    if not token or len(token) > 128:
        return None
    now = utcnow()
    row = session.execute(
        select(ConsoleSession, ApiKey)
        .join(ApiKey, ApiKey.id == ConsoleSession.key_id)
        .where(
            ConsoleSession.token_hash == _hash(token),
            ConsoleSession.expires_at > now,
            *auth_repository.usable_at(now),
        )
    ).one_or_none()
    if row is None:
        return None
    console_session, key = row
    principal = principal_of(key, auth_repository.key_datasets(session, key.id))
    return SignedIn(principal, console_session.csrf_token)


def sign_out(session: Session, token: str | None) -> None:
    """Delete the session of a cookie token (if any). Flushes."""
    if token:
        session.execute(delete(ConsoleSession).where(ConsoleSession.token_hash == _hash(token)))
        session.flush()


def new_login_token() -> str:
    """A fresh token for one sign-in form (set as LOGIN_COOKIE and as the form's hidden field)."""
    return secrets.token_urlsafe(32)


def csrf_matches(expected: str, presented: object) -> bool:
    """Constant-time comparison of the session's CSRF token with a form's."""
    if not isinstance(presented, str) or not presented:
        return False
    return hmac.compare_digest(expected.encode(), presented.encode())


def same_origin(
    origin: str | None, sec_fetch_site: str | None, expected_origin: str | None
) -> bool:
    """Whether a state-changing request comes from the console's own pages.

    Modern browsers send ``Sec-Fetch-Site``, which a page cannot forge: ``same-origin`` (or
    ``none``, typed by the user) is accepted and anything else refused, whatever ``Origin`` says
    (so a TLS proxy that changes the scheme or Host the app sees does not lock users out).
    Without it, ``Origin`` must equal ``expected_origin`` (RHOSYNTH_PUBLIC_ORIGIN, else the
    request's scheme and Host). Clients that send neither (not a browser) still need the
    session cookie and the CSRF token.
    """
    if sec_fetch_site is not None:
        return sec_fetch_site in ("same-origin", "none")
    if origin is not None:
        if expected_origin is None or origin == "null":
            return False
        return origin.lower() == expected_origin.lower()
    return True
