"""A flow named 'dup'; dup_a and dup_b both define it."""

from engine import Flow

from ._common import Out, Params

flow = Flow("dup", params=Params)


@flow.step()
def only() -> Out:
    return Out()
