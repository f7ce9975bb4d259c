"""Pages a domain package adds to the console, as plain data the console renders.

A module the registry loads may export ``console_pages``, a list of
:class:`ConsolePage` (the ERP's periods page: a period's history, its close
and reopen). A page may also add sections to the page of a job of the flows
it names (``job_flows``, ``job_view``: the ERP's posting job shows its
rejected documents, each with a button to requeue it); their forms POST to
the page's actions and come back to the job's page. A page's ``view``
returns :class:`Section` objects (text, a table of strings, forms); the
console renders them with its own templates, so everything a domain page
shows is escaped like the rest, and every form
is a POST with the session's CSRF token, allowed only to a role with the
form's permission, checked again when the action runs. An action returns
the message the person sees; a :class:`~engine.errors.BadInput` it raises
is shown as a refusal, and nothing it did in its transaction commits.

Nothing here imports the web stack: a flow package can export pages without
loading it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal

from engine.config import Settings
from engine.console.roles import Permission

__all__ = [
    "ActionRequest",
    "Cell",
    "ConsoleAction",
    "ConsolePage",
    "FormField",
    "Link",
    "PageForm",
    "PageRequest",
    "Section",
]


@dataclass(frozen=True)
class PageRequest:
    """What a page's view gets: the settings, the query string, who looks."""

    settings: Settings
    query: Mapping[str, str]
    user: str


@dataclass(frozen=True)
class ActionRequest:
    """What an action gets: the settings, the POSTed fields (CSRF token removed), who acts."""

    settings: Settings
    form: Mapping[str, str]
    user: str


@dataclass(frozen=True)
class FormField:
    name: str
    label: str
    kind: str = "text"  # text, textarea, hidden
    value: str = ""
    required: bool = True


@dataclass(frozen=True)
class Link:
    """A cell that links to a page of the console (``href``: a path, e.g. ``/x/periods?...``)."""

    text: str
    href: str


Cell = str | int | Decimal | datetime | date | Link
"""A table cell: text; a number (grouped with separators, right-aligned); a moment (in the
viewer's time zone); a date; a link."""


@dataclass(frozen=True)
class PageForm:
    """A button (with fields) that POSTs to the page's action ``action``.

    ``confirm``: asked before it is sent (a destructive action); ``beside``:
    a line shown next to the button (what the action depends on, e.g. the
    period's books check), ``beside_ok`` colouring it (``None``: plain).
    """

    action: str
    label: str
    permission: Permission
    fields: Sequence[FormField] = ()
    confirm: str | None = None
    beside: str = ""
    beside_ok: bool | None = None


@dataclass(frozen=True)
class Section:
    title: str
    text: str = ""
    columns: Sequence[str] = ()
    rows: Sequence[Sequence[Cell]] = ()
    forms: Sequence[PageForm] = ()


@dataclass(frozen=True)
class ConsoleAction:
    permission: Permission
    run: Callable[[ActionRequest], str]


@dataclass(frozen=True)
class ConsolePage:
    """``/x/<name>``: a page of the console, with its actions (``POST /x/<name>/<action>``)."""

    name: str
    title: str
    view: Callable[[PageRequest], list[Section]]
    actions: Mapping[str, ConsoleAction] = field(default_factory=dict)
    query_fields: Sequence[FormField] = ()  # a GET form above the page (e.g. the period)
    # sections shown on the page of a job of one of these flows: the request's query holds
    # the job's ``job`` id, its ``flow`` and its parameters (strings as they are, others as JSON)
    job_flows: Sequence[str] = ()
    job_view: Callable[[PageRequest], list[Section]] | None = None
