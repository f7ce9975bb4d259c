"""Test databases pooled per xdist worker: reset between tests instead of recreated.

``CREATE DATABASE ... TEMPLATE`` and ``DROP DATABASE`` cost about a second
each on a loaded machine, and most tests only add rows. A :class:`DatabasePool`
(one per pytest process, so one per xdist worker) hands out databases copied
from the migrated template and, when a test is done with one, resets it for
the next test, as river's ``riverdbtest`` does:

- every other session on it is ended (a worker the test left behind, a
  PgBouncer's server sessions), as ``DROP DATABASE ... WITH (FORCE)`` did;
- the tables a test wrote to are emptied (``TRUNCATE``), the rows the
  migrations seeded are copied back and every sequence is set back to where
  the template had it. Never by ``DELETE``, though it is 50 times cheaper: the
  dead rows it leaves are pruned later and their slots reused, so a later
  test's rows are stored out of their order, and a test whose statement
  depends on that order (an ``UPDATE ... SET seq = seq - 1`` under a unique
  index) failed once in 25 runs. What a test's ANALYZE or VACUUM told the
  planner goes too: such a table is truncated (its counts back to the
  template's) and every table's ``pg_statistic`` rows are deleted;
- :func:`built_once` runs a costly arrangement (the ERP tests' seeded, posted
  and costed month) once per worker and copies its rows into the next fresh
  database that asks for it;
- a database whose schema, grants or settings no longer match the template's
  (a test altered a table, revoked a grant, refused connections) is dropped
  rather than reset: the next test gets a fresh copy. So does one whose
  reset fails for any reason. The full comparison (:data:`FINGERPRINT`, 15 ms)
  runs only when a cheap one (:data:`SIGNATURE`: each catalog's row count and
  newest row version) differs from what the last reset left.

The reset runs with ``session_replication_role = replica``, so the engine's
guards (no ``TRUNCATE`` of the event log or the audit chain) and foreign keys
do not fire while the rows are put back: the test server's user is a
superuser, as the tests that create roles already need.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import tuple_row

__all__ = ["DatabasePool", "built_once"]

_USER_NS = "n.nspname <> 'information_schema' AND n.nspname !~ '^pg_'"

# What a test may change besides rows; equal fingerprints: the schema is the template's.
FINGERPRINT = f"""
SELECT md5(coalesce(string_agg(x, E'\\n' ORDER BY x), '')) FROM (
  SELECT format('ns %s %s %s', n.nspname, n.nspowner::regrole, n.nspacl) AS x
    FROM pg_namespace n WHERE {_USER_NS}
  UNION ALL
  SELECT format('rel %s.%s %s %s %s %s %s %s', n.nspname, c.relname, c.relkind,
                c.relowner::regrole, c.relacl, c.relrowsecurity, c.relpersistence, c.reloptions)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {_USER_NS}
  UNION ALL
  SELECT format('col %s %s %s %s %s %s %s', a.attrelid::regclass, a.attname,
                a.atttypid::regtype, a.attnotnull, a.attacl, a.attisdropped,
                pg_get_expr(d.adbin, d.adrelid))
    FROM pg_attribute a
    JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE {_USER_NS} AND a.attnum > 0
  UNION ALL
  SELECT format('con %s %s %s %s', k.conrelid::regclass, k.conname,
                pg_get_constraintdef(k.oid), k.convalidated)
    FROM pg_constraint k JOIN pg_namespace n ON n.oid = k.connamespace WHERE {_USER_NS}
  UNION ALL
  SELECT format('idx %s', pg_get_indexdef(i.indexrelid))
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {_USER_NS}
  UNION ALL
  SELECT format('trg %s %s %s', t.tgrelid::regclass, pg_get_triggerdef(t.oid), t.tgenabled)
    FROM pg_trigger t WHERE NOT t.tgisinternal
  UNION ALL
  SELECT format('fn %s %s %s %s', p.oid::regprocedure, p.proowner::regrole, p.proacl,
                md5(p.prosrc))
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE {_USER_NS}
  UNION ALL
  SELECT format('view %s %s', c.oid::regclass, pg_get_viewdef(c.oid))
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE {_USER_NS} AND c.relkind IN ('v', 'm')
  UNION ALL
  SELECT format('type %s %s', t.oid::regtype, t.typacl)
    FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE {_USER_NS}
  UNION ALL
  SELECT format('enum %s %s %s', e.enumtypid::regtype, e.enumlabel, e.enumsortorder) FROM pg_enum e
  UNION ALL
  SELECT format('pol %s %s %s %s', p.polrelid::regclass, p.polname, p.polcmd,
                pg_get_expr(p.polqual, p.polrelid))
    FROM pg_policy p
  UNION ALL
  SELECT format('ext %s %s', e.extname, e.extversion) FROM pg_extension e
  UNION ALL
  SELECT format('defacl %s %s %s', d.defaclrole::regrole, d.defaclobjtype, d.defaclacl)
    FROM pg_default_acl d
  UNION ALL
  SELECT format('db %s %s %s %s', d.datallowconn, d.datconnlimit, d.datacl, s.setconfig)
    FROM pg_database d LEFT JOIN pg_db_role_setting s ON s.setdatabase = d.oid
   WHERE d.datname = current_database()
  UNION ALL
  SELECT format('lo %s', count(*)) FROM pg_largeobject_metadata
) facts
"""

# Whether any catalog row behind FINGERPRINT changed since it was last taken: a
# DDL statement, a GRANT or an ALTER DATABASE inserts, updates or deletes one (and
# so changes a count or the newest xmin); rows a test writes into tables do not
# (only TRUNCATE, which gives a table a new file, rewrites its pg_class row).
SIGNATURE = " || ' ' || ".join(
    [
        f"(SELECT count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM {catalog})"
        for catalog in (
            "pg_namespace",
            "pg_class",
            "pg_attribute",
            "pg_attrdef",
            "pg_constraint",
            "pg_index",
            "pg_trigger",
            "pg_proc",
            "pg_type",
            "pg_enum",
            "pg_policy",
            "pg_extension",
            "pg_default_acl",
            "pg_rewrite",
            "pg_largeobject_metadata",
        )
    ]
    + [
        "(SELECT xmin::text FROM pg_database WHERE datname = current_database())",
        "(SELECT count(*) || ':' || coalesce(max(s.xmin::text::bigint), 0)"
        " FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase"
        " WHERE d.datname = current_database())",
    ]
).join(["SELECT ", ""])

# What the planner knows of each table besides its file: a test that ANALYZEd or
# VACUUMed one leaves its counts and pg_statistic rows, which would plan the next
# test's statements from this test's rows.
STATS = f"""
SELECT format('%I.%I', n.nspname, c.relname) AS name, c.relpages, c.reltuples
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE {_USER_NS} AND c.relkind = 'r'
"""
FORGET_STATISTICS = f"""
DELETE FROM pg_statistic s USING pg_class c, pg_namespace n
 WHERE s.starelid = c.oid AND n.oid = c.relnamespace AND {_USER_NS}
"""

TABLES = f"""
SELECT format('%I.%I', n.nspname, c.relname) AS name
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE {_USER_NS} AND c.relkind IN ('r', 'p') ORDER BY 1
"""
SEQUENCES = f"""
SELECT format('%I.%I', n.nspname, c.relname) AS name
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE {_USER_NS} AND c.relkind = 'S' ORDER BY 1
"""


class DatabasePool:
    """Databases copied from ``template`` on ``admin``'s server, reset between tests.

    :meth:`acquire` gives a database's name (a reset one, else a new copy);
    :meth:`release` resets it for the next test (or drops it); :meth:`close`
    drops them all. ``create``/``drop`` are how databases are made and dropped.
    """

    def __init__(self, admin: str, template: str, prefix: str, create: Any, drop: Any) -> None:
        self.admin = admin
        self.template = template
        self.prefix = prefix
        self._create = create
        self._drop = drop
        self._names = (f"{prefix}_{n}" for n in itertools.count(1))
        self._free: list[str] = []
        self._all: set[str] = set()
        self._reference: str | None = None
        self._tables: list[str] = []
        self._seeded: dict[str, bytes] = {}
        self._sequences: dict[str, tuple[int, bool]] = {}
        self._stats: dict[str, tuple[int, float]] = {}  # each table's counts in a fresh copy
        self._signatures: dict[str, str] = {}  # each database's SIGNATURE after its reset
        self.resets = 0
        self.compared = 0  # resets that compared the whole FINGERPRINT
        self.recreated = 0

    def fresh(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether ``conn``'s database holds what a new copy of the template holds."""
        if _exists(conn, [t for t in self._tables if t not in self._seeded]):
            return False
        return all(_copy_out(conn, t) == rows for t, rows in self._seeded.items())

    def info(self, name: str) -> str:
        return make_conninfo(self.admin, dbname=name)

    def acquire(self) -> str:
        if self._free:
            return self._free.pop()
        name = next(self._names)
        self._create(self.admin, name, template=self.template)
        self._all.add(name)
        if self._reference is None:
            self._learn(name)
        global _active
        _active = self
        return name

    def release(self, name: str) -> None:
        """Reset ``name`` for the next test; dropped instead when it cannot be."""
        try:
            clean = self._reset(name)
        except Exception:  # any failure: the next test gets a fresh copy instead
            clean = False
        if clean:
            self.resets += 1
            self._free.append(name)
        else:
            self.recreated += 1
            self._all.discard(name)
            self._drop(self.admin, name)

    def close(self) -> None:
        for name in sorted(self._all):
            self._drop(self.admin, name)
        self._all.clear()
        self._free.clear()

    def _learn(self, name: str) -> None:
        """What a fresh copy looks like: schema fingerprint, seeded rows, sequences."""
        with psycopg.connect(self.info(name), autocommit=True) as conn:
            self._reference = _one(conn, FINGERPRINT)
            self._tables = [r[0] for r in _rows(conn, TABLES)]
            for table in self._tables:
                if _exists(conn, [table]):
                    self._seeded[table] = _copy_out(conn, table)
            self._sequences = _sequences(conn)
            self._stats = {r[0]: (int(r[1]), float(r[2])) for r in _rows(conn, STATS)}

    def _same_schema(self, name: str, conn: psycopg.Connection[Any]) -> bool:
        """Whether ``conn``'s database has the template's schema, grants and settings:
        compared in full only when the catalogs changed since its last reset."""
        if self._signatures.pop(name, None) == _one(conn, SIGNATURE):
            return True
        self.compared += 1
        return _one(conn, FINGERPRINT) == self._reference

    def _reset(self, name: str) -> bool:
        with psycopg.connect(self.admin, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            row = admin.execute(
                "SELECT datallowconn FROM pg_database WHERE datname = %s", (name,)
            ).fetchone()
            if row is None or not row[0]:
                return False
        with psycopg.connect(self.info(name)) as conn:
            if not self._same_schema(name, conn):
                return False
            # no trigger fires (the engine's append-only guards), no key is checked
            conn.execute("SET LOCAL session_replication_role = replica")
            dirty = [t for t in _exists(conn, self._tables) if t not in self._seeded]
            # a table analyzed or vacuumed, rows or not, is truncated back to the template's
            # counts (TRUNCATE resets them), and every table's statistics are forgotten
            planned = [
                r[0]
                for r in _rows(conn, STATS)
                if (int(r[1]), float(r[2])) != self._stats.get(r[0], (0, -1.0))
                and r[0] not in self._seeded
                and r[0] not in dirty
            ]
            conn.execute(FORGET_STATISTICS)
            if emptied := dirty + planned:
                conn.execute(
                    sql.SQL("TRUNCATE {} CASCADE").format(
                        sql.SQL(", ").join(sql.SQL(t) for t in emptied)
                    )
                )
            # the seeded tables are small: compared, and put back only when they differ
            # (DELETE, not TRUNCATE: nothing cascades, and replica mode checks no key)
            for table, rows in self._seeded.items():
                if _copy_out(conn, table) == rows:
                    continue
                conn.execute(sql.SQL("DELETE FROM {}").format(sql.SQL(table)))
                with conn.cursor().copy(
                    sql.SQL("COPY {} FROM STDIN").format(sql.SQL(table))
                ) as copy:
                    copy.write(rows)
            _setval(conn, self._sequences)
            signature = _one(conn, SIGNATURE)  # what this reset leaves (its TRUNCATE included)
            conn.commit()
        self._signatures[name] = signature
        return True


_active: DatabasePool | None = None
# (key, environment) -> (rows of every non-empty table, sequences)
_built: dict[Any, tuple[dict[str, bytes], dict[str, tuple[int, bool]]]] = {}


def built_once(conn: psycopg.Connection[Any], key: str, build: Any) -> None:
    """``build(conn)`` on the test's database, once per worker for the same ``key``.

    The first time, ``build`` runs and the rows it left (every table) and the
    sequences are kept; later, on a database as fresh as a new copy, they are
    copied in instead (in one transaction, triggers and keys off as in a
    restore). Anywhere else (rows already there, the schema changed by the
    build, no pool) ``build`` runs. The environment is part of the key: a
    flag (``ERP_*``) changed by a test builds anew. ``conn`` is an autocommit connection.
    """
    pool = _active
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("ERP_")))
    cached = _built.get((key, env))
    if pool is None or not conn.autocommit or not pool.fresh(conn):
        build(conn)
        return
    if cached is None:
        build(conn)
        if _one(conn, FINGERPRINT) == pool._reference:
            rows = {t: _copy_out(conn, t) for t in _exists(conn, pool._tables)}
            _built[(key, env)] = (rows, _sequences(conn))
        return
    rows, sequences = cached
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        for table in pool._seeded:
            conn.execute(sql.SQL("DELETE FROM {}").format(sql.SQL(table)))
        for table, data in rows.items():
            with conn.cursor().copy(sql.SQL("COPY {} FROM STDIN").format(sql.SQL(table))) as copy:
                copy.write(data)
        _setval(conn, sequences)


def _sequences(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, bool]]:
    found = {}
    for seq in [r[0] for r in _rows(conn, SEQUENCES)]:
        row = _rows(conn, sql.SQL("SELECT last_value, is_called FROM {}").format(sql.SQL(seq)))[0]
        assert row is not None
        found[seq] = (int(row[0]), bool(row[1]))
    return found


def _setval(conn: psycopg.Connection[Any], sequences: dict[str, tuple[int, bool]]) -> None:
    if sequences:
        conn.execute(
            sql.SQL("SELECT {}").format(
                sql.SQL(", ").join(
                    sql.SQL("setval({}, {}, {})").format(
                        sql.Literal(seq), sql.Literal(value), sql.Literal(called)
                    )
                    for seq, (value, called) in sequences.items()
                )
            )
        )


def _rows(conn: psycopg.Connection[Any], query: Any) -> list[tuple[Any, ...]]:
    """The rows of ``query`` as tuples, whatever ``conn``'s row factory."""
    with conn.cursor(row_factory=tuple_row) as cur:
        return cur.execute(query).fetchall()


def _one(conn: psycopg.Connection[Any], query: str) -> str:
    return str(_rows(conn, query)[0][0])


def _exists(conn: psycopg.Connection[Any], tables: list[str]) -> list[str]:
    if not tables:
        return []
    query = sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT {} WHERE EXISTS (SELECT 1 FROM {})").format(sql.Literal(t), sql.SQL(t))
        for t in tables
    )
    return [r[0] for r in _rows(conn, query)]


def _copy_out(conn: psycopg.Connection[Any], table: str) -> bytes:
    out = bytearray()
    with conn.cursor().copy(sql.SQL("COPY {} TO STDOUT").format(sql.SQL(table))) as copy:
        for chunk in copy:
            out += chunk
    return bytes(out)


def pool_prefix(worker: str) -> str:
    # the pid too: two pytest sessions on one server must not share a database
    return f"engine_p_{worker}_{os.getpid()}"
