"""A setting refused at start-up, explained: each bad environment variable, its value
(``***`` for a secret) and what would do, for the CLI and the worker's health alike."""

from __future__ import annotations

from typing import Any, get_args

from pydantic import SecretStr, ValidationError
from pydantic_settings import BaseSettings

__all__ = ["bad_setting_message", "settings_model"]


def settings_model(exc: ValidationError) -> type[BaseSettings] | None:
    """The settings model (:class:`Settings`, ``SqsSettings``, a flow's own) ``exc`` is about.

    pydantic titles a ValidationError with the model's name; ``None`` when it
    is no settings model's (a flow's parameters, a message envelope).
    """
    todo: list[type[BaseSettings]] = [BaseSettings]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__name__ == exc.title:
                return sub
            todo.append(sub)
    return None


def bad_setting_message(exc: ValidationError) -> str | None:
    """One line naming each bad environment variable, its value and what would do.

    ``ENGINE_LEASE_S='abc': expected a number``; the value of a secret (a
    :class:`~pydantic.SecretStr` field: the database URL, the webhook URL) is
    shown as ``***``. ``None`` when ``exc`` is not about a settings model.
    """
    model = settings_model(exc)
    if model is None:
        return None
    prefix = str(model.model_config.get("env_prefix") or "")
    parts = []
    for error in exc.errors():
        loc = error["loc"]
        if not loc or str(loc[0]) not in model.model_fields:
            parts.append(str(error["msg"]))  # a check across fields names them itself
            continue
        field = str(loc[0])
        variable = f"{prefix}{field}".upper()
        value = "'***'" if _is_secret(model.model_fields[field].annotation) else _shown(error)
        where = f"{variable}={value}" if len(loc) == 1 else f"{variable} (item {value})"
        parts.append(f"{where}: {_expected(error)}")
    return "; ".join(parts)


def _is_secret(annotation: Any) -> bool:
    return annotation is SecretStr or any(_is_secret(a) for a in get_args(annotation))


def _shown(error: Any) -> str:
    value = error.get("input")
    text = repr(value if isinstance(value, str) else str(value))
    return text if len(text) <= 80 else text[:77] + "...'"


_EXPECTED = {
    "float_parsing": "expected a number",
    "float_type": "expected a number",
    "int_parsing": "expected a whole number",
    "int_type": "expected a whole number",
    "int_from_float": "expected a whole number",
    "bool_parsing": "expected true or false (1/0, yes/no, on/off)",
    "greater_than_equal": "expected a number >= {ge}",
    "greater_than": "expected a number > {gt}",
    "less_than_equal": "expected a number <= {le}",
    "less_than": "expected a number < {lt}",
    "literal_error": "expected {expected}",
    "string_pattern_mismatch": "expected a value matching {pattern}",
    "string_too_short": "expected at least {min_length} character(s)",
    "url_parsing": "expected a URL",
    "json_invalid": "expected JSON",
}


def _expected(error: Any) -> str:
    template = _EXPECTED.get(error["type"])
    if template is None:
        msg = str(error["msg"])
        return msg[:1].lower() + msg[1:]
    return template.format(**error.get("ctx", {}))
