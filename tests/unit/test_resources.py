"""The folders shipped beside the code (migrations, report templates) in a wheel install.

A non-editable install (the worker image) has no source tree: the wheel's
data files put them under ``<prefix>/share/erp-engine/``. These tests check
that ``pyproject.toml`` ships every such file, and that the engine finds them
through the installed distribution's file list.
"""

from __future__ import annotations

import glob
import sys
import tomllib
from pathlib import Path

import pytest

from engine.infra import resources

ROOT = Path(__file__).resolve().parents[2]


def shipped_by_pyproject() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data_files: dict[str, list[str]] = config["tool"]["setuptools"]["data-files"]
    shipped = set()
    for target, patterns in data_files.items():
        assert target.startswith(resources.SHARE + "/"), target
        for pattern in patterns:
            for path in glob.glob(str(ROOT / pattern)):
                shipped.add(Path(path).relative_to(ROOT).as_posix())
                # installed where the source tree has it, relative to share/erp-engine
                folder = target.removeprefix(resources.SHARE + "/")
                assert Path(path).parent.relative_to(ROOT).as_posix() == folder
    return shipped


@pytest.mark.parametrize("folder", ["migrations", "reports"])
def test_resources__wheel_ships_every_file_of(folder: str) -> None:
    in_tree = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / folder).rglob("*")
        if p.is_file() and "out" not in p.relative_to(ROOT / folder).parts
    }
    assert in_tree, folder
    assert in_tree <= shipped_by_pyproject()


def test_resources__source_tree_wins(tmp_path: Path) -> None:
    assert resources.shipped_dir("migrations") == ROOT / "migrations"
    assert resources.shipped_dir("reports") == ROOT / "reports"


def test_resources__wheel_install_found_through_its_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a distribution installed the way pip installs a wheel: site-packages with
    # the RECORD, data files three levels up under share/erp-engine
    prefix = tmp_path / "prefix"
    site = prefix / "lib" / "python3.11" / "site-packages"
    info = site / "erp_engine-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: erp-engine\nVersion: 0.1.0\n")
    share = prefix / "share" / "erp-engine"
    files = ["migrations/0001_engine.sql", "reports/run.html.j2", "reports/flows/close.html.j2"]
    for name in files:
        (share / name).parent.mkdir(parents=True, exist_ok=True)
        (share / name).write_text("")
    (info / "RECORD").write_text(
        "".join(f"../../../share/erp-engine/{name},,\n" for name in reversed(files))
    )
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    monkeypatch.setattr(resources, "SOURCE_ROOT", site)  # no pyproject.toml: not a source tree

    assert resources.shipped_dir("migrations") == share / "migrations"
    assert resources.shipped_dir("reports") == share / "reports"


def test_resources__missing_everywhere_gives_the_source_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(resources, "SOURCE_ROOT", tmp_path)
    monkeypatch.setattr(resources, "installed_dir", lambda name: None)
    assert resources.shipped_dir("migrations") == tmp_path / "migrations"
