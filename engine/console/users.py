"""The console's local users: add, list, remove, change a password or a role; sign in.

Passwords are hashed with argon2id (argon2-cffi's defaults, the OWASP
recommendation) and never stored, shown or logged. A sign-in that fails
counts against the user in the database, so every console process sees
the same count; past ``ENGINE_CONSOLE_SIGNIN_FAILURES`` the user is locked
for ``ENGINE_CONSOLE_SIGNIN_LOCK_S`` and even the right password is refused
until then. Every change of a user is recorded in the audit trail
(``engine audit``), in the change's transaction; a password change, a role
change and a removal also end the user's console sessions in it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from engine import store
from engine.config import Settings
from engine.console.roles import Role
from engine.console.settings import ConsoleSettings
from engine.errors import BadInput, EngineError
from engine.jobs.audit import record_action
from engine.store import db
from engine.store.status import AuditSource

__all__ = [
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


class SignInRefused(EngineError):
    """A sign-in refused: the message is the same for a wrong name and a wrong password."""


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
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BadInput(
            f"invalid user name {name!r}: expected a letter or digit, then up to 127 letters, "
            "digits or '_', '.', '@', '+', '-' (e.g. 'maria' or 'maria@example.com')"
        )
    return name


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
        if not store.console_user_delete(conn, check_name(name)):
            raise BadInput(f"no user {name!r}; `engine users list` shows them")
        store.console_session_delete_user(conn, name)  # signed out at their next request
        _audit(conn, "user-remove", name, actor, source)


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
        if not store.console_user_update_password(conn, check_name(name), hashed):
            raise BadInput(f"no user {name!r}; `engine users list` shows them")
        store.console_session_delete_user(conn, name)  # signed out at their next request
        _audit(conn, "user-passwd", name, actor, source)


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
        if not store.console_user_update_role(conn, check_name(name), parsed.value):
            raise BadInput(f"no user {name!r}; `engine users list` shows them")
        store.console_session_delete_user(conn, name)  # signed out at their next request
        _audit(conn, "user-role", name, actor, source, role=parsed.value)


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


_WRONG = "wrong user name or password"


def sign_in(settings: Settings, console: ConsoleSettings, name: str, password: str) -> User:
    """The user, when ``password`` is theirs and they are not locked; else :class:`SignInRefused`.

    A failure is counted (and may lock the user) in a transaction that
    commits before the refusal is raised.
    """
    if not _NAME.fullmatch(name or ""):
        _verify(_DUMMY, password)
        raise SignInRefused(_WRONG)
    refusal: str | None = None
    with db.connect(settings) as conn, conn.transaction():
        row = store.console_user_select(conn, name)
        if row is None or row["password_hash"] is None:
            _verify(_DUMMY, password)
            refusal = _WRONG
        elif row["locked"]:
            refusal = _locked(row["locked_until"])
        elif not _verify(row["password_hash"], password):
            failed = store.console_user_signin_failed(
                conn, name, limit=console.signin_failures, lock_s=console.signin_lock_s
            )
            locked = failed["locked_until"] if failed else None
            refusal = _WRONG if locked is None else _locked(locked)
        else:
            store.console_user_signin_ok(conn, name)
            if _hasher.check_needs_rehash(row["password_hash"]):
                store.console_user_update_password(conn, name, _hasher.hash(password))
    if refusal is not None or row is None:
        raise SignInRefused(refusal or _WRONG)
    return User(name=name, role=Role(row["role"]), via="password", password_changed=_changed(row))


def _locked(until: datetime) -> str:
    return f"too many failed sign-ins: try again after {until:%Y-%m-%d %H:%M:%S %Z}"


def _verify(hashed: str, password: str) -> bool:
    try:
        return _hasher.verify(hashed, password)
    except (VerificationError, InvalidHashError):
        return False
