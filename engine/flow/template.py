"""Templates of field names in braces (a concurrency key, a fan-out label).

``"period:{period}"``, ``"{code}"``: only plain field names, no format spec
and no conversion, so what a template renders depends on the fields' values
alone. :func:`template_fields` reads the names and refuses anything else with
a :class:`~engine.errors.DefinitionError` naming the template.
"""

from __future__ import annotations

import string

from engine.errors import DefinitionError


def template_fields(template: str, what: str, example: str) -> tuple[str, ...]:
    """The field names ``template`` uses, in order; ``what`` names it in errors
    (e.g. ``"concurrency key 'p:{p}'"``), ``example`` is a valid one (``"{period}"``)."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise DefinitionError(f"{what} is malformed: {exc}") from exc
    names: list[str] = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            shown = "{" + name + (f"!{conversion}" if conversion else "")
            shown += (f":{spec}" if spec else "") + "}"
            raise DefinitionError(
                f"{what}: {shown} is not allowed: only field names in braces are allowed, "
                f"e.g. {example}"
            )
        names.append(name)
    return tuple(names)
