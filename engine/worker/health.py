"""``engine worker --check``: could a worker run here, now? The container's health check.

One line per check, in order; a check that needs an earlier one that failed
is skipped rather than failed again:

- ``settings``: every ``ENGINE_*`` (and ``ENGINE_SQS_*``) value parses;
- ``timing``: heartbeat < lease and heartbeat < visibility, the relation the
  worker refuses to start without (:func:`engine.worker.worker.check_startup`);
- ``flows``: the flow modules load and their graphs are valid;
- ``database``: PostgreSQL answers, as the worker connects (its role too);
- ``migrations``: every migration file this release ships is applied;
- ``queue``: the transport's queue answers (SQS: ``GetQueueAttributes`` of the
  configured queue, whose own visibility timeout joins the timing relation;
  postgres: its queue table);
- ``alerts``: each sink of ``ENGINE_ALERT_SINKS`` has its settings.

Nothing is written. Messages never carry a secret: the database URL is
masked, the webhook URL never shown.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from engine import store
from engine.config import Settings
from engine.errors import ConfigError, EngineError
from engine.flow.registry import Registry
from engine.infra.bad_settings import bad_setting_message
from engine.store import db
from engine.store.migrations import unapplied
from engine.transports import transport_for
from engine.worker.worker import check_startup

__all__ = ["CheckResult", "check_worker"]


@dataclass(frozen=True)
class CheckResult:
    """One check: passed (``ok``), failed, or skipped (``ok is None``) after an earlier failure."""

    name: str
    ok: bool | None
    detail: str

    def line(self) -> str:
        mark = {True: "ok  ", False: "FAIL", None: "skip"}[self.ok]
        return f"{mark} {self.name:<10} {self.detail}"


class _Checks:
    """Runs checks in order, recording each; a failed check's dependants are skipped."""

    def __init__(self) -> None:
        self.results: list[CheckResult] = []
        self._failed: set[str] = set()

    def run(self, name: str, check: Callable[[], str], *, needs: tuple[str, ...] = ()) -> None:
        blocked = [n for n in needs if n in self._failed]
        if blocked:
            self._failed.add(name)
            self.results.append(CheckResult(name, None, f"not checked: {blocked[0]} failed"))
            return
        try:
            detail = check()
        except (EngineError, ValidationError) as exc:
            self._failed.add(name)
            self.results.append(CheckResult(name, False, _one_line(exc)))
            return
        self.results.append(CheckResult(name, True, detail))


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        # the variable's name, its value (a secret's masked) and what would do
        return bad_setting_message(exc) or " ".join(str(exc).split())
    return " ".join(str(exc).split())


def check_worker(overrides: Mapping[str, Any] | None = None) -> list[CheckResult]:
    """Every check of a worker configured by the environment (plus ``overrides``)."""
    checks = _Checks()
    found: dict[str, Any] = {}

    def settings() -> str:
        parsed = Settings()
        if overrides:
            parsed = parsed.model_copy(update=dict(overrides))
        if parsed.worker_role:  # `engine worker` takes the role on every connection
            parsed = parsed.model_copy(update={"session_role": parsed.worker_role})
        if parsed.transport == "sqs":
            from engine.transports.sqs import SqsSettings

            SqsSettings()  # a bad ENGINE_SQS_* value fails here, not in the queue check
        found["settings"] = parsed
        return (
            f"transport {parsed.transport}, {parsed.concurrency} slot(s), "
            f"{parsed.masked_database_url()}"
        )

    def timing() -> str:
        s: Settings = found["settings"]
        check_startup(s)
        return (
            f"heartbeat {s.heartbeat_s:g} s < lease {s.lease_s:g} s, "
            f"< visibility {s.visibility_s:g} s"
        )

    def flows() -> str:
        registry = Registry.load(found["settings"].flow_modules)
        return f"{len(registry.names())} loaded: {', '.join(registry.names())}"

    def database() -> str:
        s: Settings = found["settings"]
        with db.connect(s, autocommit=True) as conn:
            store.server_ping(conn)
        role = f"as role {s.session_role}" if s.session_role else "as the login's role"
        return f"{s.masked_database_url()} answers {role}"

    def migrations() -> str:
        s: Settings = found["settings"]
        with db.connect(s, autocommit=True) as conn:
            missing = unapplied(conn, s.migration_dirs)
        if missing:
            names = ", ".join(m.name for m in missing)
            raise ConfigError(
                f"{len(missing)} migration(s) not applied: {names}; run `engine migrate` "
                "(as the tables' owner) before starting workers"
            )
        return f"every migration applied ({', '.join(str(d) for d in s.migration_dirs)})"

    def queue() -> str:
        s: Settings = found["settings"]
        transport = transport_for(s)
        try:
            probe = transport.probe()
        finally:
            transport.close()
        if probe.visibility_s is not None:
            # the worker counts on the shorter of the two, as at its start-up
            check_startup(s, min(s.visibility_s, probe.visibility_s))
        return probe.description

    def alerts() -> str:
        from engine.alerts.sinks import sinks_for  # the worker's own validation, not a copy

        s: Settings = found["settings"]
        described = []
        for sink in sinks_for(s):
            if sink.name == "sns":
                described.append(f"sns ({s.alert_sns_topic_arn})")
            elif sink.name == "webhook":
                described.append("webhook (URL set)")
            else:
                described.append(sink.name)
        return ", ".join(described) or "none"

    checks.run("settings", settings)
    checks.run("timing", timing, needs=("settings",))
    checks.run("flows", flows, needs=("settings",))
    checks.run("database", database, needs=("settings",))
    checks.run("migrations", migrations, needs=("database",))
    parsed = found.get("settings")
    in_database = parsed is not None and parsed.transport == "postgres"
    checks.run("queue", queue, needs=("timing", "database") if in_database else ("timing",))
    checks.run("alerts", alerts, needs=("settings",))
    return checks.results
