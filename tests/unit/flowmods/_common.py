"""Models shared by the test flow modules."""

from pydantic import BaseModel


class Params(BaseModel):
    """No parameters."""


class Out(BaseModel):
    """An empty output."""
