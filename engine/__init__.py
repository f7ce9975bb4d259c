"""The engine: typed flows of steps, run as leased and fenced jobs.

A *flow* (:class:`Flow`) declares a typed graph of *steps*; a *job* is one run
of a flow with its parameters and a *step run* is one step of one job. Flows
are loaded explicitly into a :class:`Registry`. The public API is what this
module exports; ``flows/`` imports nothing else from ``engine``.
"""

from engine.errors import (
    BadInput,
    ConfigError,
    DefinitionError,
    EngineError,
    InvalidParameters,
    MigrationChecksumMismatch,
    MigrationError,
    StoreError,
    UnknownFlow,
)
from engine.flow import Flow, MapOver, Step, StepInput
from engine.registry import Registry
from engine.submit import Submitted, submit

__all__ = [
    "BadInput",
    "ConfigError",
    "DefinitionError",
    "EngineError",
    "Flow",
    "InvalidParameters",
    "MapOver",
    "MigrationChecksumMismatch",
    "MigrationError",
    "Registry",
    "Step",
    "StepInput",
    "StoreError",
    "Submitted",
    "UnknownFlow",
    "submit",
]
