"""``engine simulate`` end to end: real worker processes, real kills, oracles, the replay page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_reports import check_html

from engine.config import Settings

pytestmark = pytest.mark.acceptance

ORACLES = (
    "no double effect",
    "fencing",
    "nothing lost",
    "no expired lease left running",
    "attempts within the cap",
    "one active job per fingerprint",
)


def test_simulate__kills_and_duplicates_keep_every_oracle_and_render_a_replay(
    settings: Settings, tmp_path: Path
) -> None:
    assert settings.database_url is not None
    env = {
        **os.environ,
        # the simulator makes its own scratch database on this server, named with its pid
        "ENGINE_DATABASE_URL": settings.database_url.get_secret_value(),
        "ENGINE_REPORTS_DIR": str(tmp_path / "out"),
    }
    command = [sys.executable, "-m", "engine", "simulate", "--workers", "2", "--jobs", "8"]
    command += ["--kill-rate", "0.3", "--dup-rate", "0.5", "--seed", "1", "--timeout", "60"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]

    verdicts = dict(re.findall(r"^oracle (.+?) \.+ (pass|FAIL) ", done.stdout, re.MULTILINE))
    assert verdicts == dict.fromkeys(ORACLES, "pass"), done.stdout
    kills = re.search(
        r"^faults: (\d+) kill\(s\), (\d+) step run\(s\) announced again", done.stdout, re.M
    )
    assert kills is not None, done.stdout
    assert int(kills[1]) > 0 and int(kills[2]) > 0, "seed 1 plans kills and duplicates"

    page = tmp_path / "out" / "simulate-1.html"
    assert done.stdout.strip().endswith(f"replay: {page}")
    html = page.read_text(encoding="utf-8")
    parsed = check_html(html)  # html5lib, balanced tags, no external URL
    text = " ".join(parsed.text)
    for lane in ("w1/0", "w2/0", "w3/0"):  # the first two workers and a replacement
        assert f">{lane}</text>" in html
    assert html.count('class="mark kill"') == int(kills[1])
    assert 'class="mark refused"' in html, "duplicate deliveries shown as ignored"
    assert "reclaimed from w" in html, "a killed step run resumed on another worker"
    assert 'id="play"' in html and 'id="speed"' in html and "requestAnimationFrame" in html
    assert all(f"{name} pass" in text for name in ORACLES)
    assert "FAIL" not in text
