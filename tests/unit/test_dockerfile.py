"""Dockerfile.worker's structure, read as Docker reads it (dockerfile-parse).

No Docker engine or base image here: these tests check what a build would
rely on (stages, the runtime's user, signal, health check, entry point), that
every COPY source is in the build context, and that the runtime stage gets
no compiler and no embedded PostgreSQL.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile.worker"
BUILD_TOOLS = re.compile(
    r"\b(gcc|g\+\+|cc|clang|make|build-essential|python3?-dev|libpq-dev|[a-z0-9.+-]+-dev)\b"
)


@dataclass
class Stage:
    image: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def values(self, instruction: str) -> list[str]:
        return [v for i, v in self.instructions if i == instruction]


def stages() -> list[Stage]:
    with DOCKERFILE.open("rb") as f:
        structure = DockerfileParser(fileobj=f).structure
    args: dict[str, str] = {}
    found: list[Stage] = []
    for item in structure:
        instruction, value = item["instruction"], item["value"]
        if instruction == "COMMENT":
            continue
        if instruction == "ARG" and not found:  # global ARGs: usable in FROM lines
            name, _, default = value.partition("=")
            args[name.strip()] = default.strip()
        elif instruction == "FROM":
            words = value.split()
            image = re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else ""
            found.append(Stage(image, name))
        else:
            found[-1].instructions.append((instruction, value))
    return found


def runtime() -> Stage:
    return stages()[-1]


def copy_sources(value: str) -> tuple[list[str], bool]:
    """The sources of a COPY, and whether they come from another stage (--from)."""
    words = shlex.split(value)
    flags = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    return paths[:-1], any(f.startswith("--from=") for f in flags)


def test_dockerfile__builder_then_slim_runtime() -> None:
    found = stages()
    assert [s.name for s in found] == ["builder", "runtime"]
    assert all("slim" in s.image for s in found)  # the full python image carries gcc
    wheel = " ".join(found[0].values("RUN"))
    assert "pip wheel" in wheel and "'.[worker,tracing]'" in wheel


def test_dockerfile__runtime_installs_worker_wheels_only() -> None:
    run = " ".join(runtime().values("RUN"))
    assert "from=builder" in run
    assert "pip install --no-index --find-links=/wheels 'erp-engine[worker,tracing]'" in run
    assert "dev]" not in run and "pgserver" not in run
    env = " ".join(runtime().values("ENV"))
    assert "PIP_NO_CACHE_DIR=1" in env


def test_dockerfile__runtime_has_no_build_tools() -> None:
    for run in runtime().values("RUN"):
        assert not BUILD_TOOLS.search(run), run
        assert "apt-get install" not in run and "apk add" not in run, run
    assert not [v for v in runtime().values("COPY") if not copy_sources(v)[1]], (
        "the runtime stage installs wheels; it copies nothing from the build context"
    )


def test_dockerfile__runtime_user_is_not_root() -> None:
    users = runtime().values("USER")
    assert users, "the runtime stage must set USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    assert user.isdigit() and int(user) >= 1000  # a fixed uid, not a name resolved at run time
    groupadd = " ".join(runtime().values("RUN"))
    assert f"--uid {user}" in groupadd


def test_dockerfile__signal_healthcheck_entrypoint() -> None:
    stage = runtime()
    assert stage.values("STOPSIGNAL") == ["SIGTERM"]
    (health,) = stage.values("HEALTHCHECK")
    command = health.split("CMD", 1)[1].strip()
    assert json.loads(command) == ["engine", "worker", "--check"]
    assert json.loads(stage.values("ENTRYPOINT")[-1]) == ["engine"]
    assert json.loads(stage.values("CMD")[-1]) == ["worker"]


def test_dockerfile__every_copy_source_is_in_the_build_context() -> None:
    ignored = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copied = 0
    for stage in stages():
        for value in stage.values("COPY") + stage.values("ADD"):
            sources, from_stage = copy_sources(value)
            if from_stage:
                continue
            for source in sources:
                assert (ROOT / source).exists(), f"COPY source {source!r} is not in the repo"
                assert not any(fnmatch.fnmatch(source, p) for p in ignored), (
                    f"COPY source {source!r} is excluded by .dockerignore"
                )
                copied += 1
    assert copied >= 5


@pytest.mark.parametrize("folder", ["migrations", "reports"])
def test_dockerfile__builder_copies_what_the_wheel_ships(folder: str) -> None:
    copied = {copy_sources(v)[0][0] for v in stages()[0].values("COPY")}
    assert folder in copied  # the wheel's data files (share/erp-engine/) come from here
