"""``engine status JOB`` shows a job's result (its last checkpoint) whole when short, cut when
long: a close's result is tens of kilobytes, which a terminal reader cannot use; ``--json``
gives it whole."""

from __future__ import annotations

import json

from engine.cli.status import RESULT_SHOWN, shown_result


def test_status__a_short_result_is_shown_whole() -> None:
    output = {"letters": 8, "text": "Hello, Ada!"}
    assert shown_result(output) == json.dumps(output, sort_keys=True)


def test_status__a_long_result_is_cut_saying_how_long_it_is_and_where_it_is_whole() -> None:
    output = {"stores": [{"store": f"ST{n:03}", "closing": "1234.56"} for n in range(500)]}
    whole = json.dumps(output, sort_keys=True)
    shown = shown_result(output)
    assert shown.startswith(whole[:RESULT_SHOWN])
    assert f"({len(whole):,} characters; --json shows it whole)" in shown
    assert len(shown) < RESULT_SHOWN + 80
