"""The console's local users: add, list, remove, change a password or a role; sign in.

Passwords are hashed with argon2id (argon2-cffi's defaults, the OWASP
recommendation) and never stored, shown or logged. A wrong password counts
against the user *from that address* in the database, so every console
process sees the same count; past ``ENGINE_CONSOLE_SIGNIN_FAILURES`` the
user is locked from that address (only: the real user signs in from
theirs) for ``ENGINE_CONSOLE_SIGNIN_LOCK_S``, and even the right password is
refused from there until then. An unknown name, a user without a password,
a lock and a wrong password are answered alike (:data:`REFUSED`) after one
hash each, so neither the text nor the time tells which it was; the hashes
run under the caller's gate (:mod:`engine.console.throttle`). Every change
of a user is recorded in the audit trail (``engine audit``), in the
change's transaction; a password change, a role change and a removal
also end the user's console sessions in it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from engine import store
from engine.config import Settings
from engine.console.roles import Role
from engine.console.settings import ConsoleSettings
from engine.errors import BadInput, EngineError, checked
from engine.jobs.audit import record_action
from engine.store import db
from engine.store.status import AuditSource

__all__ = [
    "REFUSED",
    "Account",
    "SignInRefused",
    "User",
    "UserRow",
    "account",
    "add_user",
    "check_password",
    "list_users",
    "parse_role",
    "remove_user",
    "set_password",
    "set_role",
    "sign_in",
]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}")
MIN_PASSWORD = 12
_hasher = PasswordHasher()
# verified against when the name is unknown, so that a wrong name costs what a wrong password does
_DUMMY = _hasher.hash("not a password of anyone")


REFUSED = "sign-in refused: wrong user name or password, or too many attempts (wait a few minutes)"


class SignInRefused(EngineError):
    """A sign-in refused: the message is always :data:`REFUSED`; ``reason`` is for the log only."""

    def __init__(self, reason: str) -> None:
        super().__init__(REFUSED)
        self.reason = reason


@dataclass(frozen=True)
class User:
    """A signed-in person."""

    name: str
    role: Role
    via: str  # "password" or "oidc"
    password_changed: str = ""  # signed in with the password of this age (a change ends it)


@dataclass(frozen=True)
class UserRow:
    """A user as ``engine users list`` shows it (no hash: only whether there is one)."""

    name: str
    role: str
    has_password: bool
    created_at: datetime
    password_changed_at: datetime | None
    last_signin_at: datetime | None
    locked: bool


def check_name(name: str) -> str:
    expected = (
        "a letter or digit, then up to 127 letters, digits or '_', '.', '@', '+', '-' "
        "(e.g. 'maria' or 'maria@example.com')"
    )
    return checked(name, _NAME, "user name", expected)


def parse_role(role: str) -> Role:
    try:
        return Role(role)
    except ValueError:
        valid = ", ".join(r.value for r in Role)
        raise BadInput(f"invalid role {role!r}; valid: {valid}") from None


def check_password(password: str) -> str:
    if len(password) < MIN_PASSWORD:
        raise BadInput(f"password too short ({len(password)} characters): at least {MIN_PASSWORD}")
    return password


def _audit(
    conn: Any, action: str, name: str, actor: str | None, source: AuditSource, **detail: Any
) -> None:
    record_action(conn, action, "user", name, actor=actor, source=source, detail=detail or None)


def add_user(
    settings: Settings,
    name: str,
    role: str,
    password: str | None,
    *,
    actor: str | None = None,
    source: AuditSource = AuditSource.CLI,
) -> None:
    """Add a user; ``password`` ``None``: one who signs in only through the load balancer."""
    check_name(name)
    parsed = parse_role(role)
    hashed = None if password is None else _hasher.hash(check_password(password))
    with db.connect(settings) as conn, conn.transaction():
        if store.console_user_insert(conn, name, parsed.value, hashed) is None:
            raise BadInput(f"user {name!r} exists; change it with `engine users passwd` or `role`")
        _audit(conn, "user-add", name, actor, source, role=parsed.value)


def remove_user(
    settings: Settings,
    name: str,
    *,
    actor: str | None = None,
    source: AuditSource = AuditSource.CLI,
) -> None:
    with db.connect(settings) as conn, conn.transaction():
        found = store.console_user_delete(conn, check_name(name))
        _after_change(conn, found, name, "user-remove", actor, source)


def set_password(
    settings: Settings,
    name: str,
    password: str | None,
    *,
    actor: str | None = None,
    source: AuditSource = AuditSource.CLI,
) -> None:
    """A new password (``None``: none, OIDC only); it also unlocks the user."""
    hashed = None if password is None else _hasher.hash(check_password(password))
    with db.connect(settings) as conn, conn.transaction():
        found = store.console_user_update_password(conn, check_name(name), hashed)
        _after_change(conn, found, name, "user-passwd", actor, source)


def set_role(
    settings: Settings,
    name: str,
    role: str,
    *,
    actor: str | None = None,
    source: AuditSource = AuditSource.CLI,
) -> None:
    parsed = parse_role(role)
    with db.connect(settings) as conn, conn.transaction():
        found = store.console_user_update_role(conn, check_name(name), parsed.value)
        _after_change(conn, found, name, "user-role", actor, source, role=parsed.value)


def _after_change(
    conn: Any,
    found: Any,
    name: str,
    action: str,
    actor: str | None,
    source: AuditSource,
    **detail: Any,
) -> None:
    """After user ``name`` was changed (``found``: it exists; else :class:`BadInput`): signed
    out at their next request, and the change audited."""
    if not found:
        raise BadInput(f"no user {name!r}; `engine users list` shows them")
    store.console_session_delete_user(conn, name)
    _audit(conn, action, name, actor, source, **detail)


def list_users(settings: Settings) -> list[UserRow]:
    with db.connect(settings, autocommit=True) as conn:
        return [UserRow(**r) for r in store.console_user_select_all(conn)]


@dataclass(frozen=True)
class Account:
    """What a request checks of a signed-in user: their role now, and their password's age."""

    role: Role
    password_changed: str  # when the password last changed ('' without one)


def _changed(row: dict[str, Any]) -> str:
    at = row.get("password_changed_at")
    return "" if at is None else at.isoformat()


def account(settings: Settings, name: str) -> Account | None:
    """User ``name``'s role and password age (``None``: no such user)."""
    if not _NAME.fullmatch(name):
        return None
    with db.connect(settings, autocommit=True) as conn:
        row = store.console_user_select(conn, name)
    return None if row is None else Account(Role(row["role"]), _changed(row))


def sign_in(
    settings: Settings,
    console: ConsoleSettings,
    name: str,
    password: str,
    *,
    address: str,
    hashing: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
) -> User:
    """The user, when ``password`` is theirs and they are not locked from ``address``;
    else :class:`SignInRefused`.

    Whatever the reason, a refusal costs one hash and the same statements;
    the user is read and the hash computed under ``hashing()`` (the
    throttle's bounded gate), no connection held open while hashing; a wrong
    password is counted (and may lock the user from ``address``) before the
    refusal is raised. The console never writes a password hash (its role
    may not: a hash of older argon2 parameters is replaced at the next
    ``engine users passwd``, not at a sign-in).
    """
    valid = bool(_NAME.fullmatch(name or ""))
    row: dict[str, Any] | None = None
    locked = False
    with hashing():  # the read too: as many connections at once as hashes, none held while hashing
        if valid:
            with db.connect(settings, autocommit=True) as conn:
                row = store.console_user_select(conn, name)
                locked = store.console_signin_locked(conn, name, address)
        hashed: str | None = row["password_hash"] if row is not None else None
        good = _verify(hashed or _DUMMY, password) and hashed is not None
    if row is None or hashed is None or not good or locked:
        if valid:  # an unknown name counts nothing, through the same statement
            with db.connect(settings, autocommit=True) as conn:
                store.console_signin_failed(
                    conn, name, address, limit=console.signin_failures, lock_s=console.signin_lock_s
                )
        raise SignInRefused(_reason(row, hashed, locked))
    with db.connect(settings) as conn, conn.transaction():
        store.console_user_signin_ok(conn, name)
        store.console_signin_succeeded(conn, name, address, lock_s=console.signin_lock_s)
    return User(name=name, role=Role(row["role"]), via="password", password_changed=_changed(row))


def _reason(row: dict[str, Any] | None, hashed: str | None, locked: bool) -> str:
    """Why a sign-in was refused, for the log (the person reads :data:`REFUSED`)."""
    if row is None:
        return "unknown user"
    if hashed is None:
        return "no password (signs in through the load balancer)"
    return "locked from this address" if locked else "wrong password"


def _verify(hashed: str, password: str) -> bool:
    try:
        return _hasher.verify(hashed, password)
    except (VerificationError, InvalidHashError):
        return False
