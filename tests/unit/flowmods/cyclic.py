"""A flow whose steps depend on each other."""

from engine import Flow

from ._common import Out, Params

flow = Flow("cyclic", params=Params)


@flow.step(after=["two"])
def one() -> Out:
    return Out()


@flow.step(after=["one"])
def two() -> Out:
    return Out()
