"""Where the folders shipped beside the code are: ``migrations/`` and ``reports/``.

In a source tree (a checkout, an editable install, ``make venv``) they are
next to the ``engine`` package; a wheel installs them as data files under
``<prefix>/share/erp-engine/`` (``[tool.setuptools.data-files]`` in
``pyproject.toml``), which the package's installed file list locates, so a
non-editable install (the worker image) finds them wherever pip put them.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

__all__ = ["DISTRIBUTION", "SHARE", "SOURCE_ROOT", "installed_dir", "shipped_dir"]

DISTRIBUTION = "erp-engine"
SHARE = f"share/{DISTRIBUTION}"  # where the wheel's data files go, under the install prefix

# the folder holding the engine package (and pyproject.toml, in a source tree)
SOURCE_ROOT = Path(__file__).resolve().parent.parent.parent


def shipped_dir(name: str) -> Path:
    """The folder ``name`` (``migrations``, ``reports``) of this installation.

    The source tree's when the code runs from one (it has ``pyproject.toml``
    beside the package), else the wheel's data files; when neither exists the
    source-tree path is returned, so the error that follows names a path.
    """
    source = SOURCE_ROOT / name
    if (SOURCE_ROOT / "pyproject.toml").is_file():
        return source
    return installed_dir(name) or source


def installed_dir(name: str) -> Path | None:
    """``<prefix>/share/erp-engine/<name>`` of the installed distribution, if it has one."""
    try:
        files = metadata.distribution(DISTRIBUTION).files or []
    except metadata.PackageNotFoundError:
        return None
    marker = f"{SHARE}/{name}/"
    for file in files:
        posix = file.as_posix()
        if marker in posix:
            # RECORD paths are relative to site-packages (../../../share/...)
            located = Path(str(file.locate()))
            depth = posix[posix.index(marker) + len(marker) :].count("/") + 1
            return located.parents[depth - 1].resolve()
    return None
