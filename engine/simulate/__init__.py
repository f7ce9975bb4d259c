"""``engine simulate``: real workers under injected faults, checked by oracles, replayed.

The simulator is a test of the whole engine a user can run: it starts real
``engine worker`` processes on a scratch database, kills them mid-step and
duplicates their messages and submits on a plan drawn from a seed, then
checks by SQL that the invariants of RELIABILITY.md held (no double effect,
fencing, nothing lost, ...) and draws what happened as an animated page.

- the click command is :mod:`engine.cli.simulate`;
- :mod:`~engine.simulate.run`: one simulation, from scratch database to oracles,
  with the seed's :mod:`~engine.simulate.plan` of faults, its
  :mod:`~engine.simulate.fleet` of workers and :mod:`~engine.simulate.oracles`;
- :mod:`~engine.simulate.flow`: the three-step flow the workers run;
- :mod:`~engine.simulate.replay`: the replay page, a view of the events and
  faults (:mod:`~engine.simulate.record`) laid out on a
  :mod:`~engine.simulate.timeline` and drawn as SVG (:mod:`~engine.simulate.draw`);
- ``simulate.sql``: the simulator's own statements, loaded by name.
"""

from engine.simulate.plan import SimOptions
from engine.simulate.run import run_simulation

__all__ = ["SimOptions", "run_simulation"]
