"""Flow declaration: typed step graphs, checked before anything runs. Pure: no I/O.

A :class:`Flow` is a declaration, not a run: a run of a flow is a *job*, a
run of a step is a *step run*, both rows of the store. A flow is checked
whole when it is declared (a DAG, typed inputs matched to outputs, a retry
policy, concurrency keys that render from its parameters, and the signals
its steps wait for declared), so a bad flow
fails at import, never halfway through a job. A process knows the flows it
loaded explicitly into a :class:`~engine.flow.registry.Registry`; nothing is
registered by an import's side effect.

- :mod:`.flow`: ``Flow``, the graph of steps, checked whole;
- :mod:`.step`: ``Step``, ``StepInput``, ``MapOver``, injectables (a step declared, resolved);
- :mod:`.declare`: a function read into a declared step, each mistake named;
- :mod:`.inputs`: each parameter of a step matched to the one input that provides it;
- :mod:`.signals`: the signals a flow declares, waits for and approves by;
- :mod:`.params`: parsing a job's parameters, and which are searchable;
- :mod:`.describe`: a flow in words (``engine flows show``);
- :mod:`.registry`: which flows (and versions) this process knows;
- :mod:`.concurrency`: declaring and rendering keys (the claim SQL enforces them);
- :mod:`.label`: how a fan-out's runs are named for people (``label="{code}"``);
- :mod:`.retention`: how long finished jobs stay before they are pruned;
- :mod:`.retry`: ``RetryPolicy`` and a step's explicit control flow
  (``Retry``, ``Fail``, ``Reject``, ``Cancel``).
"""

from engine.flow.flow import Flow, MapOver, Step, StepInput, register_injectable

__all__ = ["Flow", "MapOver", "Step", "StepInput", "register_injectable"]
