from __future__ import annotations

import multiprocessing
import shutil
from pathlib import Path

import psycopg
import pytest

from engine.config import Settings
from engine.errors import MigrationChecksumMismatch, MigrationError
from engine.store import migrations

MIGRATIONS = Settings().migration_dirs[0]
ALL = Settings().migration_dirs
ALL_FILES = sorted(p.stem for d in ALL for p in d.glob("*.sql"))


def _applied(info: str) -> list[tuple[int, str]]:
    with psycopg.connect(info) as conn:
        return [
            tuple(r)
            for r in conn.execute("SELECT version, name FROM engine_migrations ORDER BY version")
        ]


def test_migrate__from_empty_database_applies_every_file(empty_db: str) -> None:
    with psycopg.connect(empty_db, autocommit=True) as conn:
        report = migrations.apply(conn, ALL)
    assert report.applied == ALL_FILES
    assert [name for _, name in _applied(empty_db)] == ALL_FILES


def test_migrate__twice_in_a_row_applies_nothing_the_second_time(empty_db: str) -> None:
    with psycopg.connect(empty_db, autocommit=True) as conn:
        migrations.apply(conn, ALL)
        again = migrations.apply(conn, ALL)
    assert again.applied == []
    assert len(again.already) == len(ALL_FILES)


def _migrate_in_process(info: str, barrier: multiprocessing.synchronize.Barrier) -> None:
    barrier.wait(timeout=30)
    with psycopg.connect(info, autocommit=True) as conn:
        migrations.apply(conn, ALL)


def test_migrate__two_processes_at_once_apply_each_file_once(empty_db: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_migrate_in_process, args=(empty_db, barrier)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0]
    versions = [v for v, _ in _applied(empty_db)]
    assert versions == sorted(set(versions))
    assert len(versions) == len(ALL_FILES)


def test_migrate__edited_applied_migration_is_refused(empty_db: str, tmp_path: Path) -> None:
    folder = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS, folder)
    with psycopg.connect(empty_db, autocommit=True) as conn:
        migrations.apply(conn, folder)
        first = sorted(folder.glob("*.sql"))[0]
        first.write_text(first.read_text() + "\n-- an innocent-looking edit\n")
        with pytest.raises(MigrationChecksumMismatch, match=first.name):
            migrations.apply(conn, folder)


def test_migrate__new_file_is_applied_after_the_old_ones(empty_db: str, tmp_path: Path) -> None:
    folder = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS, folder)
    with psycopg.connect(empty_db, autocommit=True) as conn:
        migrations.apply(conn, folder)
        (folder / "9999_extra.sql").write_text("CREATE TABLE extra (id int);")
        report = migrations.apply(conn, folder)
    assert report.applied == ["9999_extra"]


def test_migrate__failing_file_rolls_back_and_is_not_recorded(
    empty_db: str, tmp_path: Path
) -> None:
    folder = tmp_path / "migrations"
    folder.mkdir()
    (folder / "0001_ok.sql").write_text("CREATE TABLE ok (id int);")
    (folder / "0002_bad.sql").write_text("CREATE TABLE half (id int); SELECT 1/0;")
    with psycopg.connect(empty_db, autocommit=True) as conn:
        with pytest.raises(MigrationError, match=r"0002_bad\.sql"):
            migrations.apply(conn, folder)
        assert conn.execute("SELECT to_regclass('half')").fetchone() == (None,)
    assert _applied(empty_db) == [(1, "0001_ok")]


def test_migrate__misnamed_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "1_init.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match="NNNN_description"):
        migrations.discover(tmp_path)


def test_migrate__one_version_in_two_folders_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "0001_one.sql").write_text("SELECT 1;")
    (tmp_path / "b" / "0001_other.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match="share number 0001"):
        migrations.discover([tmp_path / "a", tmp_path / "b"])
