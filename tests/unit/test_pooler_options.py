"""Behind a transaction pooler a connection's settings become SET LOCALs (engine.store.db)."""

from __future__ import annotations

from pydantic import SecretStr

from engine.config import Settings
from engine.store import db


def test_option_values__every_form_of_libpq_options() -> None:
    options = "-c lock_timeout=100 -cstatement_timeout=200 --search-path=a,b -X junk"
    assert db._option_values(options) == [
        ("lock_timeout", "100"),
        ("statement_timeout", "200"),
        ("search_path", "a,b"),
    ]


def test_session_values__bounds_then_role_and_the_socket_only_for_a_direct_session() -> None:
    s = Settings(
        database_url=SecretStr("postgresql://u@127.0.0.1/d"),
        session_role="engine_worker",
        lock_timeout_s=7,
    )
    pooled = db._session_values(s, None, 2.5, socket=False)
    assert pooled == [
        ("lock_timeout", "7000"),
        ("statement_timeout", "2500"),
        ("role", "engine_worker"),
    ]
    direct = dict(db._session_values(s, None, None, socket=True))
    assert direct["tcp_user_timeout"] == "60000" and direct["role"] == "engine_worker"
    # the direct form is unchanged: startup options, the role last
    assert db.conninfo(s).endswith("-c role=engine_worker'")
