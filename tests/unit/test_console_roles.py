"""The console's roles and settings, without a database."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engine.console.roles import Permission, Role, allowed
from engine.console.settings import ConsoleSettings


@pytest.mark.parametrize(
    ("role", "may"),
    [
        (Role.VIEWER, {Permission.READ}),
        (Role.OPERATOR, {Permission.READ, Permission.OPERATE}),
        (Role.ACCOUNTANT, {Permission.READ, Permission.APPROVE}),
        (Role.ADMIN, set(Permission)),
    ],
)
def test_roles__each_role_has_exactly_its_permissions(role: Role, may: set[Permission]) -> None:
    assert {p for p in Permission if allowed(role, p)} == may


def test_roles__an_unknown_role_may_do_nothing() -> None:
    assert not any(allowed("boss", p) for p in Permission)


def test_settings__a_short_session_key_or_an_unknown_role_is_refused_naming_it() -> None:
    with pytest.raises(ValidationError, match="at least 32 characters, got 5"):
        ConsoleSettings(secret="short")
    with pytest.raises(ValidationError, match="oidc_role"):
        ConsoleSettings(oidc_role="boss")
    with pytest.raises(ValidationError, match="alb_region"):
        ConsoleSettings(alb_region="not a region")
    assert ConsoleSettings(alb_region="eu-west-1").alb
    assert not ConsoleSettings().alb
