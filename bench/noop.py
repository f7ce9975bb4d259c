"""``noop``: three steps a -> b -> c that do nothing, to time the engine itself."""

from __future__ import annotations

from pydantic import BaseModel

from engine import Flow


class NoopParams(BaseModel):
    i: int


class A(BaseModel):
    i: int


class B(BaseModel):
    i: int


class C(BaseModel):
    i: int


flow = Flow("noop", params=NoopParams, description="benchmark: three no-op steps")


@flow.step()
def a(params: NoopParams) -> A:
    return A(i=params.i)


@flow.step(after=["a"])
def b(x: A) -> B:
    return B(i=x.i)


@flow.step(after=["b"])
def c(x: B) -> C:
    return C(i=x.i)
