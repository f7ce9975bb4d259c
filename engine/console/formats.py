"""How the console shows a moment, a job id, money and a domain page's cell: read at a glance.

- A moment is one style everywhere: ``<time datetime="…Z">`` holding the UTC
  text (what a browser without scripts shows), which ``console.js`` rewrites
  in the viewer's time zone, same layout, with the zone's name.
- A job id is its first 8 characters (what ``engine`` accepts as a prefix),
  linked to its page, the whole id in the title and a copy button.
- Money and counts are grouped with separators (the reports' ``amount``)
  and right-aligned in tabular figures (``td.num``).
- A cell of a domain page (:data:`engine.console.extension.Cell`) is drawn
  by its type: a :class:`~engine.console.extension.Link`, a moment, a
  number, or text.

Everything is escaped: the only markup built here is from escaped parts.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from jinja2 import Environment
from markupsafe import Markup, escape

from engine.console.extension import Link
from engine.reports.render import amount, instant

__all__ = ["SHORT_ID", "install", "is_number", "moment", "short_id"]

_DAY_OR_MONTH = re.compile(r"\d{4}-\d{2}(-\d{2})?")

SHORT_ID = 8
"""Characters of a job id shown (a prefix ``engine status`` and the console resolve)."""


def moment(value: datetime | str | None) -> Markup | str:
    """``<time datetime="<UTC ISO>">YYYY-MM-DD HH:MM:SS UTC</time>``; a dash for none."""
    at = instant(value)
    if at is None:
        return "\u2013" if value in (None, "") else str(value)
    iso = at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    text = at.strftime("%Y-%m-%d %H:%M:%S UTC")
    return Markup('<time datetime="{}" title="{}">{}</time>').format(iso, text, text)


def short_id(value: Any, href: str | None = None) -> Markup:
    """A job id's first characters (linked to ``href``), the whole id in its title, copyable."""
    whole = str(value)
    short = Markup('<code class="id" title="{}">{}</code>').format(whole, whole[:SHORT_ID])
    if href:
        short = Markup('<a href="{}">{}</a>').format(href, short)
    button = Markup(
        '<button type="button" class="copy noprint" data-copy="{}" title="copy {}"'
        ' aria-label="copy {}">copy</button>'
    ).format(whole, whole, whole)
    return Markup('<span class="jobid">{}{}</span>').format(short, button)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def _cell(value: Any) -> Markup:
    """A domain page's cell, by its type, as the ``<td>`` it is."""
    if isinstance(value, Link):
        return Markup('<td class="nw"><a href="{}">{}</a></td>').format(value.href, value.text)
    if isinstance(value, datetime):
        return Markup('<td class="mono">{}</td>').format(moment(value))
    if isinstance(value, date):
        return Markup('<td class="nw">{}</td>').format(value.isoformat())
    if is_number(value):
        return Markup('<td class="num">{}</td>').format(amount(value))
    if isinstance(value, str) and _DAY_OR_MONTH.fullmatch(value):
        return Markup('<td class="nw">{}</td>').format(value)  # never 2026-⏎11
    return Markup("<td>{}</td>").format(escape(value))


def install(env: Environment) -> None:
    """The console's filters on the reports' environment (``ts`` becomes a ``<time>``)."""
    env.filters["ts"] = moment
    env.filters["short_id"] = short_id
    env.filters["job_ref"] = short_id  # the job page's ids (run.html.j2) too
    env.filters["cell"] = _cell
    env.tests["number"] = is_number
