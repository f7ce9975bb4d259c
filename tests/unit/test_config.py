from __future__ import annotations

import pytest

from engine.config import Settings
from engine.errors import MalformedMessage
from engine.infra.secrets import mask_url
from engine.store.queries import parse
from engine.transports.message import StepMessage


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("postgresql://erp:pa55@db:5432/erp", "postgresql://erp:***@db:5432/erp"),
        ("postgresql://erp@db/erp", "postgresql://erp@db/erp"),
        ("host=db password=pa55 user=erp", "host=db password=*** user=erp"),
        ("host=db password='p a55' user=erp", "host=db password=*** user=erp"),
        ("postgresql://db/erp?user=erp&password=pa55", "postgresql://db/erp?user=erp&password=***"),
        ("error at postgresql://u:p%40ss@h/d: refused", "error at postgresql://u:***@h/d: refused"),
    ],
)
def test_mask_url__hides_every_password(text: str, masked: str) -> None:
    assert mask_url(text) == masked


def test_settings__database_url_is_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGINE_DATABASE_URL", "postgresql://erp:pa55@db/erp")
    settings = Settings()
    assert "pa55" not in repr(settings)
    assert "pa55" not in settings.masked_database_url()


def test_settings__flow_modules_from_a_comma_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGINE_FLOW_MODULES", "flows.example, flows.other")
    assert Settings().flow_modules == ["flows.example", "flows.other"]


@pytest.mark.parametrize(
    ("name", "value", "field", "expected"),
    [
        ("ENGINE_MIGRATION_DIRS", "/a, /b", "migration_dirs", ["/a", "/b"]),
        ("ENGINE_MIGRATION_DIRS", '["/a"]', "migration_dirs", ["/a"]),
        ("ENGINE_FLOW_MODULES", '["flows.example"]', "flow_modules", ["flows.example"]),
        ("ENGINE_ALERT_SINKS", "log,webhook", "alert_sinks", ["log", "webhook"]),
    ],
)
def test_settings__lists_from_commas_or_json(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, field: str, expected: list[str]
) -> None:
    monkeypatch.setenv(name, value)
    assert [str(v) for v in getattr(Settings(), field)] == expected


def test_settings__unknown_alert_sink_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGINE_ALERT_SINKS", "log,pager")
    with pytest.raises(ValueError, match="pager"):
        Settings()


def test_queries__block_without_invariant_line_is_refused() -> None:
    with pytest.raises(ValueError, match="invariant"):
        parse("-- job_get --\nSELECT 1;\n", "x.sql")
    assert parse("-- job_get --\n-- why\nSELECT 1;\n", "x.sql") == {"job_get": "-- why\nSELECT 1;"}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("", "empty"),
        ("not json", "envelope"),
        ('{"v": 2, "job_id": "x"}', "envelope"),
        ('{"v":1,"job_id":"00000000-0000-0000-0000-000000000000"}\x00', "NUL"),
        ("9" * 5000, "bytes"),
    ],
)
def test_step_message__malformed_bodies_say_why(body: str, reason: str) -> None:
    with pytest.raises(MalformedMessage, match=reason):
        StepMessage.decode(body)


def test_report_link__s3_object_or_local_file() -> None:
    from engine.reports.links import report_link

    job = "3f334b3d-0000-4000-8000-000000000001"
    s3 = Settings(reports_url="s3://erp-reports/prod/")
    assert report_link(s3, job) == f"https://erp-reports.s3.amazonaws.com/prod/runs/{job}.html"
    local = report_link(Settings(), job)
    assert local.startswith("file:///") and local.endswith(f"/runs/{job}.html")
