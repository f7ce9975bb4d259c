"""A flow's parameters: parsed with every problem named, and which of them are searchable.

:func:`parse_params` validates a submit's values with the flow's pydantic
model and names each problem as the option ``engine submit`` generates for
the field (``--period: invalid value ...``). :func:`check_searchable` checks
``Flow(searchable=...)``: each a field of the model, named so that its tag
(``param.NAME``, written at submit, :mod:`engine.jobs.search`) is a valid
tag name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from engine.errors import DefinitionError, InvalidParameters
from engine.flow.names import checked_names

__all__ = ["check_searchable", "parse_params"]

_SEARCHABLE = re.compile(r"[a-z][a-z0-9_]{0,55}")  # its tag, "param." + name, is a tag name


def parse_params(flow: str, model: type[BaseModel], values: Mapping[str, Any]) -> BaseModel:
    """Validate ``values`` with ``model`` (``flow``'s parameters), or raise
    :class:`InvalidParameters`.

    Each problem names the option, the bad value and the expected form.
    Unknown keys are problems too.
    """
    fields = model.model_fields
    valid = {n for n, f in fields.items()} | {f.alias for f in fields.values() if f.alias}
    problems = [
        f"unknown parameter {key!r}; valid parameters: {', '.join(fields)}"
        for key in values
        if key not in valid
    ]
    known = {k: v for k, v in values.items() if k in valid}
    try:
        parsed = model.model_validate(known)
    except ValidationError as exc:
        problems += [_problem(error) for error in exc.errors()]
    if problems:
        raise InvalidParameters(flow, problems)
    return parsed


def check_searchable(
    flow: str, params: type[BaseModel], searchable: Sequence[str]
) -> tuple[str, ...]:
    """The searchable parameters: each a field of ``params``, named as a tag's name may be."""
    if isinstance(searchable, str):
        raise DefinitionError(
            f"searchable must be a sequence of parameter names, got the string {searchable!r}"
            f" (write searchable=({searchable!r},))",
            flow=flow,
        )
    names = tuple(searchable)
    fields = sorted(params.model_fields)
    for name in names:
        if name not in params.model_fields:
            raise DefinitionError(
                f"searchable parameter {name!r} is not a field of {params.__name__} "
                f"(its fields: {', '.join(fields) or 'none'})",
                flow=flow,
            )
    return checked_names(
        names,
        _SEARCHABLE,
        invalid=lambda name: (
            f"searchable parameter {name!r}: expected a name of lower-case "
            "letters, digits and '_', starting with a letter, at most 56 characters"
        ),
        twice=f"searchable names a parameter twice: {names!r}",
        flow=flow,
    )


def _problem(error: Mapping[str, Any]) -> str:
    """One line per pydantic error: option, value given, expected form."""
    # Spelled like the CLI option that ``engine submit`` generates for the field.
    loc = ".".join(str(part) for part in error["loc"]).replace("_", "-")
    option = f"--{loc}" if loc else "parameters"
    if error["type"] == "missing":
        return f"{option}: required, none given"
    message = str(error["msg"]).removeprefix("Value error, ")
    message = message.replace("Input should be ", "expected ", 1)
    given = error.get("input")
    if repr(given) in message:
        return f"{option}: {message}"
    return f"{option}: invalid value {given!r}: {message}"
