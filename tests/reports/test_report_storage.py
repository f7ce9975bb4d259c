"""Reports where ECS can keep them: with ENGINE_REPORTS_URL set they go to S3 (moto), not disk."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import psycopg
import pytest
from click.testing import CliRunner
from harness import fast_settings, flows_registry, thread_worker, wait_job_ended, wait_until
from moto import mock_aws

from engine import BadInput, Registry, submit, write_report_file
from engine.cli import main
from engine.config import Settings
from engine.errors import ReportStoreError
from engine.reports import render_index
from engine.reports.links import report_link
from engine.reports.storage import FolderStore, S3Store

BUCKET = "erp-reports"
URL = f"s3://{BUCKET}/prod/reports"
PREFIX = "prod/reports"
HTML = "text/html; charset=utf-8"
HOSTILE = "<script>alert(1)</script>"
ITEMS = """sku,brand_code,name,standard_cost,price
BR1-0001,BR1,Shirt,12.5,29.90
BR9-0001,BR9,Ghost brand item,1,2
=cmd|' /C calc'!A0,BR1,Formula sku,1,2
"""


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """moto's S3 in process, with one bucket; no real AWS is reachable from here."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.fixture
def on_s3(settings: Settings, tmp_path: Path) -> Settings:
    """A worker's settings with reports on S3; ``reports_dir`` must stay untouched."""
    return fast_settings(
        settings, report_on_end=True, reports_url=URL, reports_dir=tmp_path / "local"
    )


def keys(client: Any) -> dict[str, str]:
    """Every object of the bucket and its content type."""
    listed = client.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    return {
        o["Key"]: client.head_object(Bucket=BUCKET, Key=o["Key"])["ContentType"] for o in listed
    }


def body(client: Any, key: str) -> str:
    return str(client.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode("utf-8"))


def test_s3_reports__a_finished_jobs_report_and_the_index_land_in_the_bucket(
    s3: Any, on_s3: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("chain", {"hold_step": HOSTILE}, settings=on_s3, registry=flows_registry())
    run_key = f"{PREFIX}/runs/{job.job_id}.html"
    with thread_worker(on_s3):
        assert wait_job_ended(conn, job.job_id) == "done"
        # the worker renders after the job's last commit
        wait_until(lambda: {run_key, f"{PREFIX}/index.html"} <= keys(s3).keys(), what="reports")
    assert keys(s3) == {run_key: HTML, f"{PREFIX}/index.html": HTML}
    page = body(s3, run_key)
    assert str(job.job_id) in page and "done" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and HOSTILE not in page
    assert f"runs/{job.job_id}.html" in body(s3, f"{PREFIX}/index.html")
    assert not on_s3.reports_dir.exists(), "a worker on S3 writes nothing to reports_dir"
    # the alert's link opens the object the worker wrote
    assert report_link(on_s3, job.job_id) == f"https://{BUCKET}.s3.amazonaws.com/{run_key}"


def test_s3_reports__the_migration_rejects_csv_goes_beside_the_reports(
    s3: Any,
    settings: Settings,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conn.execute("INSERT INTO erp_brands VALUES (1, 'BR1', 'North')")
    # the flow reads the environment's settings, as a worker process does
    monkeypatch.setenv("ENGINE_REPORTS_URL", URL)
    monkeypatch.setenv("ENGINE_REPORTS_DIR", str(tmp_path / "local"))
    fast = fast_settings(
        settings,
        flow_modules=["flows.migration"],
        reports_url=URL,
        reports_dir=tmp_path / "local",
        report_on_end=True,
    )
    source = tmp_path / "items.csv"
    source.write_text(ITEMS, encoding="utf-8")
    registry = Registry.load(["flows.migration"])
    job = submit(
        "migration", {"source": str(source), "kind": "items"}, settings=fast, registry=registry
    )
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job.job_id) == "done"
        wait_until(lambda: f"{PREFIX}/index.html" in keys(s3), what="the index")
    stored = keys(s3)
    rejects = [k for k in stored if k.endswith("-rejects.csv")]
    assert len(rejects) == 1 and rejects[0].startswith(f"{PREFIX}/migration-")
    assert stored[rejects[0]] == "text/csv; charset=utf-8"
    text = body(s3, rejects[0])
    assert "unknown brand BR9" in text and "'=cmd" in text  # the formula neutralised
    output = conn.execute(
        "SELECT output FROM engine_step_runs WHERE job_id = %s AND step = 'report'",
        (job.job_id,),
    ).fetchone()
    assert output is not None and output["output"]["rejects_file"] == f"s3://{BUCKET}/{rejects[0]}"
    assert f"s3://{BUCKET}/{rejects[0]}" in body(s3, f"{PREFIX}/runs/{job.job_id}.html")
    assert not (tmp_path / "local").exists()


def test_s3_reports__a_missing_bucket_is_named_and_the_job_still_ends(
    s3: Any,
    on_s3: Settings,
    conn: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    missing = on_s3.model_copy(update={"reports_url": "s3://no-such-reports-bucket/x"})
    with pytest.raises(ReportStoreError) as raised:
        render_index(missing)
    assert "'no-such-reports-bucket' does not exist" in str(raised.value)
    assert "ENGINE_REPORTS_URL=s3://no-such-reports-bucket/x" in str(raised.value)

    job = submit("chain", {}, settings=missing, registry=flows_registry())
    with caplog.at_level(logging.WARNING, logger="engine"), thread_worker(missing):
        assert wait_job_ended(conn, job.job_id) == "done"
        wait_until(
            lambda: any("no-such-reports-bucket" in r.getMessage() for r in caplog.records),
            what="the warning naming the bucket",
        )
    rows = conn.execute(
        "SELECT status FROM engine_step_runs WHERE job_id = %s", (job.job_id,)
    ).fetchall()
    assert {r["status"] for r in rows} == {"done"}, "a report failure fails or strands nothing"
    assert not missing.reports_dir.exists()


def test_s3_reports__cli_build_goes_to_s3_unless_out_is_given(
    s3: Any, on_s3: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    job = submit("chain", {}, settings=on_s3, registry=flows_registry())
    with thread_worker(on_s3.model_copy(update={"report_on_end": False})):
        assert wait_job_ended(conn, job.job_id) == "done"
    assert on_s3.database_url is not None
    env = {
        "ENGINE_DATABASE_URL": on_s3.database_url.get_secret_value(),
        "ENGINE_FLOW_MODULES": "testflows",
        "ENGINE_REPORTS_URL": URL,
        "ENGINE_REPORTS_DIR": str(tmp_path / "local"),
    }
    result = CliRunner().invoke(main, ["reports", "build"], env=env)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"s3://{BUCKET}/{PREFIX}/index.html (1 run report(s))"
    assert set(keys(s3)) == {f"{PREFIX}/index.html", f"{PREFIX}/runs/{job.job_id}.html"}
    result = CliRunner().invoke(main, ["reports", "build", "--out", str(tmp_path / "b")], env=env)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "b" / "runs" / f"{job.job_id}.html").exists()
    assert not (tmp_path / "local").exists()

    env["ENGINE_REPORTS_URL"] = "s3://no-such-reports-bucket"
    result = CliRunner().invoke(main, ["report", str(job.job_id)], env=env)
    assert result.exit_code == 3, result.output
    assert "the reports bucket 'no-such-reports-bucket' does not exist" in result.output


@pytest.mark.parametrize("name", ["", "../x.csv", "/etc/passwd", ".hidden", "a//b", "a b.csv"])
def test_write_report_file__a_name_outside_the_reports_is_refused(
    name: str, tmp_path: Path
) -> None:
    settings = Settings(reports_dir=tmp_path)
    with pytest.raises(BadInput, match="report file name") as raised:
        write_report_file(name, "x", settings=settings)
    assert repr(name) in str(raised.value)
    assert list(tmp_path.iterdir()) == []


def test_write_report_file__local_returns_the_absolute_path(tmp_path: Path) -> None:
    where = write_report_file("a-rejects.csv", "row\n", settings=Settings(reports_dir=tmp_path))
    assert where == str((tmp_path / "a-rejects.csv").resolve())
    assert Path(where).read_text(encoding="utf-8") == "row\n"


def test_report_store__keys_without_a_prefix_and_the_store_described(s3: Any) -> None:
    store = S3Store(f"s3://{BUCKET}")
    assert store.put("index.html", "<p>x</p>", HTML) == f"s3://{BUCKET}/index.html"
    assert keys(s3) == {"index.html": HTML}
    assert store.describe() == f"s3://{BUCKET}"
    assert FolderStore(Path("out")).describe() == "out"
