"""What the commands of one invocation share: its settings and registry, loaded on first use.

Loading lazily keeps ``engine --help`` and commands that need neither working
when the database or a flow module is broken.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from engine.config import Settings
    from engine.flow.registry import Registry

__all__ = ["State", "current"]


class State:
    """Per-invocation settings and registry, loaded on first use."""

    def __init__(self) -> None:
        self._settings: Settings | None = None
        self._registry: Registry | None = None
        self._installed: Registry | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            from engine.config import (
                Settings,
            )  # pydantic-settings: only for a command that reads it

            self._settings = Settings()
        return self._settings

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            from engine.flow.registry import (
                Registry,
            )  # the flows: only for a command that needs them

            self._registry = Registry.load(self.settings.flow_modules)
        return self._registry

    @property
    def installed(self) -> Registry:
        """The installed flows package's modules (their commands), empty if it does not load."""
        if self._installed is None:
            from engine.flow.registry import Registry

            try:
                self._installed = Registry.load()
            except Exception:  # a broken or absent package: the list's own commands only
                self._installed = Registry()
        return self._installed


def _state() -> State:
    return click.get_current_context().ensure_object(State)


def current() -> State:
    """The running invocation's :class:`State` (made by the root context on first use)."""
    return click.get_current_context().ensure_object(State)
