"""Who may do what in the console: four roles, each a set of permissions.

``viewer`` reads. ``operator`` also acts on jobs: cancel, retry, replay a
dead letter, pause, resume or run a schedule. ``accountant`` also approves or
rejects what waits for an approval, and closes or reopens a period; an
accountant is not an operator, and an operator cannot approve (separation
of duties, as an auditor expects). ``admin`` may do everything.
"""

from __future__ import annotations

import enum

__all__ = ["Permission", "Role", "allowed"]


class Permission(enum.StrEnum):
    READ = "read"
    OPERATE = "operate"  # cancel, retry, replay, schedules
    APPROVE = "approve"  # approvals, a period's close and reopen
    ADMIN = "admin"


class Role(enum.StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    ACCOUNTANT = "accountant"
    ADMIN = "admin"


_GRANTS: dict[Role, frozenset[Permission]] = {
    Role.VIEWER: frozenset({Permission.READ}),
    Role.OPERATOR: frozenset({Permission.READ, Permission.OPERATE}),
    Role.ACCOUNTANT: frozenset({Permission.READ, Permission.APPROVE}),
    Role.ADMIN: frozenset(Permission),
}


def allowed(role: Role | str, permission: Permission) -> bool:
    """Whether ``role`` has ``permission`` (an unknown role has none)."""
    try:
        return permission in _GRANTS[Role(role)]
    except ValueError:
        return False
