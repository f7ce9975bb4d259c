"""The users page: an admin reads who may sign in and with which role; no one else sees it."""

from __future__ import annotations

import re
from typing import Any


def test_users__an_admin_sees_every_user_with_its_role_and_never_a_hash(
    client_for: Any, people: dict[str, tuple[str, str]]
) -> None:
    adam = client_for("adam")
    page = adam.get("/users")
    assert page.status_code == 200
    table = page.text.split('<table id="users">', 1)[1]
    for name, (role, password) in people.items():
        assert re.search(rf"<tr><td>{name}</td><td>{role}</td><td>password</td>", table), name
        assert password not in page.text
    assert "$argon2" not in page.text


def test_users__only_an_admin_has_the_page_or_its_link(client_for: Any) -> None:
    assert 'href="/users"' in client_for("adam").get("/").text
    for name in ("vera", "otto", "anna"):
        client = client_for(name)
        r = client.get("/users", follow_redirects=False)
        assert r.status_code == 403, name
        assert "may not do this: needs admin" in r.text
        assert 'href="/users"' not in client.get("/").text, name
