"""The demo flow, until the ERP flows (costing, posting, migration) exist.

It exercises every shape the engine supports: a root step reading the job
parameters (``plan``), a fan-out with one step run per chunk (``work``) and a
fan-in gathering every chunk's result (``total``). The arithmetic is trivial
on purpose; what matters is that each step is a pure function of its inputs.

::

    engine submit example --period 2026-11 --chunks 3
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from engine import Flow
from flows.erp.types import Period

__all__ = ["Chunk", "ChunkResult", "ExampleParams", "Plan", "Total", "flow"]


class ExampleParams(BaseModel):
    """Parameters of an example job."""

    period: Period
    chunks: int = Field(default=3, ge=1, le=100, description="how many chunks to fan out to")


class Chunk(BaseModel):
    """One slice of work: a few numbers to add up."""

    index: int
    numbers: list[int]


class Plan(BaseModel):
    """The chunks the job is split into."""

    chunks: list[Chunk]


class ChunkResult(BaseModel):
    """The sum of one chunk."""

    index: int
    total: int


class Total(BaseModel):
    """The job's result: the grand total over all chunks."""

    period: str
    chunks: int
    total: int


flow = Flow(
    "example",
    params=ExampleParams,
    description="Demo flow: plan chunks, sum each one in parallel, add the sums up.",
    searchable=("period",),  # engine runs --param period=2026-11
)


@flow.step()
def plan(params: ExampleParams) -> Plan:
    """Split the numbers 1..10*chunks into ``chunks`` chunks of ten."""
    return Plan(
        chunks=[
            Chunk(index=i, numbers=list(range(10 * i + 1, 10 * i + 11)))
            for i in range(params.chunks)
        ]
    )


@flow.step(map_over="plan.chunks")
def work(chunk: Chunk) -> ChunkResult:
    """Add up one chunk (one step run per chunk)."""
    return ChunkResult(index=chunk.index, total=sum(chunk.numbers))


@flow.step(after=["work"])
def total(results: list[ChunkResult], params: ExampleParams) -> Total:
    """Add up the sums of every chunk (fan-in)."""
    return Total(period=params.period, chunks=len(results), total=sum(r.total for r in results))
