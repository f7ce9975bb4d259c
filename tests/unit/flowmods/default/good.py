"""A valid flow."""

from engine import Flow

from .._common import Out, Params

flow = Flow("good", params=Params)


@flow.step()
def only() -> Out:
    return Out()
