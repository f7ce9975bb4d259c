"""What a simulation is asked to do, and the faults its seed plans.

Drawing the plan per step run (not per tick) keeps the faults of a seed the
same from run to run, whatever the machine's speed: a step run is or is not
a kill target, and where in the step the kill lands is a share of the
step's seeded duration.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from engine.simulate.flow import STEPS

__all__ = ["Plan", "SimOptions"]


@dataclass(frozen=True)
class SimOptions:
    """The command's options."""

    workers: int = 2
    jobs: int = 8
    kill_rate: float = 0.3
    dup_rate: float = 0.5
    seed: int = 1
    concurrency: int = 1
    timeout_s: float = 120.0
    keep_db: bool = False


@dataclass
class Plan:
    """The faults of a seed, by (job number, step)."""

    kill_at: dict[tuple[int, str], float]  # fraction of the step's duration
    dup_copies: dict[tuple[int, str], int]
    resubmit: set[int]

    @classmethod
    def draw(cls, options: SimOptions) -> Plan:
        rng = random.Random(options.seed)
        kill_at: dict[tuple[int, str], float] = {}
        dup_copies: dict[tuple[int, str], int] = {}
        resubmit: set[int] = set()
        for n in range(options.jobs):
            for step in STEPS:
                # draw every number whatever the rates, so one rate does not reshuffle the other
                kill, where, dup, copies = (
                    rng.random(),
                    rng.uniform(0.2, 0.7),
                    rng.random(),
                    rng.randint(1, 2),
                )
                if kill < options.kill_rate:
                    kill_at[(n, step)] = where
                if dup < options.dup_rate:
                    dup_copies[(n, step)] = copies
            if rng.random() < options.dup_rate:
                resubmit.add(n)
        return cls(kill_at, dup_copies, resubmit)
