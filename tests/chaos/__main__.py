"""``python -m tests.chaos`` (``make chaos``): every scenario, one JSON line each on stdout.

Flags override the ``CHAOS_*`` variables (:mod:`.config`)::

    python -m tests.chaos [--transport postgres,sqs] [--seed 1] [--scenarios 1]
                          [--rounds 12] [--faults kill,pause,...] [--keep-db] [-v]

Exit 0 when every scenario passes, 1 when one fails (its seed and the command
that replays it are printed), 2 on a bad setting, 3 when PostgreSQL is not
reachable.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from engine import Settings, connect
from engine.store.db import conninfo

from .config import ChaosConfig
from .run import say
from .scenario import run_scenario

_LOCAL = ("127.0.0.1", "localhost", "::1")


def admin_conninfo() -> str:
    """The engine's own rule (ENGINE_DATABASE_URL, else the embedded server); local only."""
    info = conninfo(Settings())
    host = str(conninfo_to_dict(info).get("host") or "")
    if host and not host.startswith("/") and host not in _LOCAL:
        raise ValueError(f"the chaos run only uses a local PostgreSQL, not host {host!r}")
    with connect(Settings(), autocommit=True):
        pass
    return info


def run_all(cfg: ChaosConfig, admin: str | None = None) -> list[dict[str, Any]]:
    """Run every scenario of ``cfg``; their JSON lines (each also printed on stdout)."""
    cfg.check()
    admin = admin or admin_conninfo()
    lines = []
    runs = [
        (t, seed, False)
        for t in cfg.transports
        for seed in range(cfg.seed, cfg.seed + cfg.scenarios)
    ]
    # one more scenario per pooled transport: every worker through PgBouncer
    runs += [(t, cfg.seed, True) for t in cfg.pooled()]
    for transport, seed, pooled in runs:
        line = run_scenario(cfg, transport, seed, admin, pooled=pooled)
        print(json.dumps(line, default=str), flush=True)
        if line["result"] != "pass":
            say(f"FAIL {line['scenario']}: {'; '.join(line['failures'])}")
            say(f"replay: {line['replay']}")
        lines.append(line)
    summary(lines)
    return lines


_SUMMARY = (
    "double_effects",
    "lost",
    "stranded",
    "key_overlaps",
    "key_overlaps_sampled",
    "uncharged",
    "zombie_commits",
    "retried_unfinished",
)


def summary(lines: list[dict[str, Any]]) -> None:
    """The figures that must hold, one line per scenario, and the recoveries against bounds."""
    for line in lines:
        must = " ".join(f"{k}={line.get(k)}" for k in _SUMMARY)
        say(
            f"summary {line['scenario']}: {line['result']}; {must}; "
            f"recovery p95 {line.get('recovery_p95_s')} s max {line.get('recovery_max_s')} s "
            f"(bound {line.get('bound_s')} s, {line.get('recovery_samples')} samples); "
            f"partition recovery p95 {line.get('partition_recovery_p95_s')} s "
            f"max {line.get('partition_recovery_max_s')} s "
            f"(bound {line.get('partition_recovery_bound_s')} s, "
            f"{line.get('partition_recovery_samples')} samples), noticed "
            f"{line.get('partition_notice_s')} s (bound {line.get('partition_notice_bound_s')} s)"
        )


def _split(value: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in value.split(",") if p.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--transport", help="comma-separated: postgres,sqs")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--scenarios", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--faults", help="comma-separated fault kinds")
    parser.add_argument("--keep-db", action="store_true", default=None)
    parser.add_argument("-v", "--verbose", action="store_true", default=None)
    args = parser.parse_args(argv)
    try:
        cfg = ChaosConfig.from_env(
            transports=_split(args.transport) if args.transport else None,
            seed=args.seed,
            scenarios=args.scenarios,
            rounds=args.rounds,
            faults=_split(args.faults) if args.faults else None,
            keep_db=args.keep_db,
            verbose=args.verbose,
        )
        cfg.check()
        admin = admin_conninfo()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (psycopg.Error, Exception) as exc:
        print(f"error: PostgreSQL is not reachable: {exc}", file=sys.stderr)
        return 3
    lines = run_all(cfg, admin)
    return 0 if all(line["result"] == "pass" for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
