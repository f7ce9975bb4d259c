"""The registry: which flows this process knows, loaded explicitly.

A flow module exports a module attribute ``flow`` (a :class:`~engine.flow.flow.Flow`),
or ``flows``, a list of them. A module may also export ``commands``: command
line commands (click) that the ``engine`` CLI adds to its own, so a domain
package brings its tools (``engine seed``) without the engine knowing it,
``console_pages``: pages of ``engine console`` (the ERP's periods), built
from :mod:`engine.console.extension`'s plain data types, and ``search_fields``:
options of ``engine runs`` and fields of the console's runs search
(:class:`engine.SearchField`: the ERP's ``--period``, ``--store``, ``--document``).
:meth:`Registry.load` imports the named modules (by default every module of
the ``flows`` package), freezes and validates each flow, and refuses two flows
with the same name. There is no process-global registry and importing a module
registers nothing: whoever needs flows (CLI, worker, tests) loads a registry.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Sequence
from types import ModuleType

from engine.errors import DefinitionError, UnknownFlow
from engine.flow import Flow

__all__ = ["DEFAULT_PACKAGE", "Registry"]

DEFAULT_PACKAGE = "flows"


class Registry:
    """Flows by name. Build one with :meth:`load`, or directly from flows in tests."""

    def __init__(self, flows: Iterable[Flow] = ()) -> None:
        self._flows: dict[str, Flow] = {}
        self._origins: dict[str, str] = {}
        self.commands: list[object] = []  # what modules export as `commands`
        self.console_pages: list[object] = []  # and as `console_pages`
        self.search_fields: list[object] = []  # and as `search_fields`
        for flow in flows:
            self._add(flow, origin="(given directly)")

    @classmethod
    def load(cls, modules: Sequence[str] | None = None) -> Registry:
        """Import ``modules`` and register the ``flow`` each one exports.

        With ``None``, every module directly in the ``flows`` package (names
        starting with ``_`` excepted) is imported and those without a ``flow``
        attribute are skipped: they are domain helpers. A module named
        explicitly must import and export a ``flow``, else
        :class:`DefinitionError`; a package named that exports nothing itself
        (``flows``) stands for its modules, loaded as the default loads them, so
        ``ENGINE_FLOW_MODULES=flows,mymodule`` adds a module to the installed
        flows. Each flow is validated and frozen.
        """
        registry = cls()
        explicit = modules is not None
        for module_name in modules if modules is not None else _default_modules():
            module = _import(module_name)
            if explicit and _bare_package(module):
                # a package listed (`flows,mymodule`): its modules, as the default loads them
                for name in _default_modules(module_name):
                    registry._take(_import(name), name, explicit=False)
                continue
            registry._take(module, module_name, explicit=explicit)
        return registry

    def _take(self, module: ModuleType, module_name: str, *, explicit: bool) -> None:
        """Register what ``module`` exports; a module named explicitly must export something."""
        self.commands.extend(getattr(module, "commands", None) or [])
        self.console_pages.extend(getattr(module, "console_pages", None) or [])
        self.search_fields.extend(getattr(module, "search_fields", None) or [])
        flow = getattr(module, "flow", None)
        many = getattr(module, "flows", None)
        if isinstance(flow, Flow):
            self._add(flow, origin=module_name)
        elif isinstance(many, list) and many and all(isinstance(f, Flow) for f in many):
            for one in many:
                self._add(one, origin=module_name)
        elif explicit and not any(getattr(module, a, None) for a in _EXPORTS[2:]):
            found = "none" if flow is None else type(flow).__name__
            raise DefinitionError(
                f"module {module_name!r} does not export a Flow as 'flow' (found: {found})"
            )

    def _add(self, flow: Flow, *, origin: str) -> None:
        if self._flows.get(flow.name) is flow:
            return  # the same object re-exported by a second module is not a conflict
        if flow.name in self._flows:
            raise DefinitionError(
                f"defined twice: in {self._origins[flow.name]!r} and in {origin!r}",
                flow=flow.name,
            )
        flow.freeze()
        self._check_keys(flow)
        self._flows[flow.name] = flow
        self._origins[flow.name] = origin

    def _check_keys(self, flow: Flow) -> None:
        """Flows that share a concurrency key template must agree on its limit and counting."""
        for step in flow.steps.values():
            mine = step.concurrency
            if mine is None:
                continue
            for other in self._flows.values():
                for theirs in (s.concurrency for s in other.steps.values()):
                    if theirs is None or theirs.key != mine.key or theirs == mine:
                        continue
                    raise DefinitionError(
                        f"step {step.name!r} declares concurrency key {mine.key!r} with limit "
                        f"{mine.limit} (per_job={mine.per_job}), but flow {other.name!r} declares "
                        f"it with limit {theirs.limit} (per_job={theirs.per_job}); a shared key "
                        "needs one limit",
                        flow=flow.name,
                        steps=(step.name,),
                    )

    def get(self, name: str) -> Flow:
        """The flow called ``name``; :class:`UnknownFlow` (listing known flows) otherwise."""
        try:
            return self._flows[name]
        except KeyError:
            raise UnknownFlow(name, self._flows) from None

    def names(self) -> list[str]:
        """Names of the registered flows, sorted."""
        return sorted(self._flows)

    def flows(self) -> list[Flow]:
        """The registered flows, sorted by name."""
        return [self._flows[name] for name in self.names()]

    def runnable(self) -> list[str]:
        """``name:version`` of every registered flow: what this worker may claim."""
        return [f"{f.name}:{f.version}" for f in self.flows()]

    def origin(self, name: str) -> str:
        """The module the flow ``name`` was loaded from."""
        self.get(name)
        return self._origins[name]

    def __contains__(self, name: object) -> bool:
        return name in self._flows

    def __len__(self) -> int:
        return len(self._flows)

    def __repr__(self) -> str:
        return f"Registry({self.names()})"


# what a module may export for the registry
_EXPORTS = ("flow", "flows", "commands", "console_pages", "search_fields")


def _import(module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except Exception as exc:
        raise DefinitionError(
            f"cannot import flow module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc


def _bare_package(module: ModuleType) -> bool:
    """A package that exports nothing itself (``flows``): its modules are what it means."""
    return hasattr(module, "__path__") and not any(getattr(module, a, None) for a in _EXPORTS)


def _default_modules(package_name: str | None = None) -> list[str]:
    name = package_name or DEFAULT_PACKAGE
    package = importlib.import_module(name)
    return [
        f"{name}.{info.name}"
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name)
        if not info.name.startswith("_")
    ]
