"""Numbered SQL migrations, applied once each, in order, under an advisory lock.

Files are named ``NNNN_description.sql``. Each is applied in its own
transaction together with its row in ``engine_migrations`` (version, name,
sha256 checksum). A file edited after it was applied is refused: the fix for a
deployed schema is a new migration, never an edit.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from engine.config import Settings
from engine.errors import ConfigError, MigrationChecksumMismatch, MigrationError
from engine.store.queries import load

_NAME = re.compile(r"^(?P<version>\d{4})_(?P<slug>[a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path
    checksum: str

    def sql(self) -> str:
        return self.path.read_text(encoding="utf-8")


@dataclass(frozen=True)
class MigrationReport:
    applied: list[str]
    already: list[str]


def discover(folders: Path | Sequence[Path]) -> list[Migration]:
    """The migrations in ``folders``, as one sequence by version.

    A stray file name, or one version number in two files (in one folder or
    across folders), is an error.
    """
    found: dict[int, Migration] = {}
    for folder in [folders] if isinstance(folders, Path) else folders:
        _discover_one(Path(folder), found)
    return [found[v] for v in sorted(found)]


def _discover_one(folder: Path, found: dict[int, Migration]) -> None:
    if not folder.is_dir():
        raise MigrationError(f"migrations folder {str(folder)!r} does not exist")
    for path in sorted(folder.iterdir()):
        if path.suffix != ".sql":
            continue
        match = _NAME.match(path.name)
        if match is None:
            raise MigrationError(
                f"migration file {path.name!r} is not named NNNN_description.sql "
                "(four digits, then lowercase letters, digits and underscores)"
            )
        version = int(match["version"])
        if version in found:
            raise MigrationError(
                f"two migrations share number {version:04d}: "
                f"{found[version].path.name!r} and {path.name!r}"
            )
        checksum = hashlib.sha256(path.read_bytes()).hexdigest()
        found[version] = Migration(version, path.stem, path, checksum)


def apply(conn: psycopg.Connection[Any], folder: Path | Sequence[Path]) -> MigrationReport:
    """Apply the migrations of ``folder`` (or folders) not applied yet; autocommit ``conn``."""
    if not conn.autocommit:
        raise MigrationError("migrate needs an autocommit connection (each file commits alone)")
    q = load("migrations")
    migrations = discover(folder)
    conn.execute(q["migration_lock"])
    try:
        conn.execute(q["migration_table_create"])
        rows = conn.execute(q["migration_select_all"]).fetchall()
        applied = {_field(row, "version", 0): row for row in rows}
        _check_applied(migrations, applied)
        report = MigrationReport(applied=[], already=[])
        for migration in migrations:
            if migration.version in applied:
                report.already.append(migration.name)
                continue
            try:
                with conn.transaction():
                    conn.execute(migration.sql().encode("utf-8"))
                    conn.execute(
                        q["migration_insert"],
                        {
                            "version": migration.version,
                            "name": migration.name,
                            "checksum": migration.checksum,
                        },
                    )
            except psycopg.Error as exc:
                raise MigrationError(
                    f"migration {migration.path.name!r} failed and was rolled back: "
                    f"{str(exc).strip()}"
                ) from exc
            report.applied.append(migration.name)
        return report
    finally:
        conn.execute(q["migration_unlock"])


def unapplied(conn: psycopg.Connection[Any], folder: Path | Sequence[Path]) -> list[Migration]:
    """The migrations of ``folder`` (or folders) this database has not applied; reads only.

    An applied file edited since is refused (:class:`MigrationChecksumMismatch`),
    as :func:`apply` would. Versions applied that no file here names are not
    reported: a newer release migrated first, which a rolling deploy does.
    """
    q = load("migrations")
    migrations = discover(folder)
    present = conn.execute(q["migration_table_exists"]).fetchone()
    if not _field(present, "present", 0):
        return migrations
    applied = {_field(r, "version", 0): r for r in conn.execute(q["migration_select_all"])}
    known = {v: r for v, r in applied.items() if v in {m.version for m in migrations}}
    _check_applied(migrations, known)
    return [m for m in migrations if m.version not in applied]


def _field(row: Any, name: str, index: int) -> Any:
    return row[name] if isinstance(row, dict) else row[index]


def _check_applied(migrations: list[Migration], applied: dict[int, Any]) -> None:
    by_version = {m.version: m for m in migrations}
    for version, row in sorted(applied.items()):
        migration = by_version.get(version)
        name = _field(row, "name", 1)
        if migration is None:
            raise MigrationError(
                f"migration {name!r} is recorded as applied but its file "
                f"{version:04d}_*.sql is missing from the migrations folder"
            )
        recorded = _field(row, "checksum", 2)
        if recorded != migration.checksum:
            raise MigrationChecksumMismatch(
                f"migration {migration.path.name!r} was edited after it was applied "
                f"(applied checksum {recorded[:12]}..., file now {migration.checksum[:12]}...); "
                "restore the file and put the change in a new migration"
            )


def migrate(settings: Settings) -> MigrationReport:
    """Apply every configured folder's migrations (``ENGINE_MIGRATION_DIRS``)."""
    from engine.store import db

    if db.pooled(settings):
        # its advisory lock is a session's: through a transaction pooler it would be
        # taken on one server session and never released from it (another would be
        # asked to unlock), and the next `engine migrate` would wait for it for ever
        raise ConfigError(
            f"engine migrate runs through a transaction pooler ({settings.masked_database_url()}"
            "): it needs one session for its advisory lock and DDL; point ENGINE_DATABASE_URL "
            "at PostgreSQL itself (or a session-pooling port) for migrations, or set "
            "ENGINE_POOLER=none if nothing pools this connection"
        )
    # the one unbounded connection: DDL on large tables may run long, and a
    # second `engine migrate` waits for the first's advisory lock
    with db.connect(settings, autocommit=True, lock_timeout_s=0, statement_timeout_s=0) as conn:
        return apply(conn, settings.migration_dirs)
