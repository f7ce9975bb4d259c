"""How the console draws a moment, a job id and a domain page's cells (engine.console.formats)."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

from engine.console.extension import Link
from engine.console.formats import moment, short_id
from engine.reports.render import environment


def _cell(value: object) -> str:
    env = environment()
    from engine.console import formats

    formats.install(env)
    return str(env.from_string("{{ v | cell }}").render(v=value))


def test_money_is_grouped_and_right_aligned_text_is_escaped_and_links_link() -> None:
    assert _cell(Decimal("1234567.5")) == '<td class="num">1,234,567.50</td>'
    assert _cell(12345) == '<td class="num">12,345</td>'
    assert _cell("<b>SI-3</b>") == "<td>&lt;b&gt;SI-3&lt;/b&gt;</td>"
    assert _cell(Link("2026-11", "/x/periods?period=2026-11&a=<")) == (
        '<td class="nw"><a href="/x/periods?period=2026-11&amp;a=&lt;">2026-11</a></td>'
    )
    # a day, a month and a link are never wrapped at their hyphens
    assert _cell(date(2026, 11, 15)) == '<td class="nw">2026-11-15</td>'
    assert _cell("2026-11") == '<td class="nw">2026-11</td>'


def test_a_moment_is_its_utc_iso_for_the_browser_and_utc_text_without_a_script() -> None:
    at = datetime(2026, 11, 30, 23, 4, 5, 123456, tzinfo=timezone(timedelta(hours=1)))
    assert str(moment(at)) == (
        '<time datetime="2026-11-30T22:04:05.123Z" title="2026-11-30 22:04:05 UTC">'
        "2026-11-30 22:04:05 UTC</time>"
    )
    # the ISO text a summary carries, the same way; none is a dash
    assert str(moment("2026-11-30T22:04:05+00:00")).endswith(">2026-11-30 22:04:05 UTC</time>")
    assert moment(None) == "\u2013"
    assert "UTC" in _cell(datetime(2026, 1, 2, tzinfo=UTC))


def test_a_job_id_shows_its_prefix_linked_with_the_whole_id_to_copy() -> None:
    job = uuid.UUID("a8c801bc-0b08-4647-9473-403b41bfbd00")
    html = str(short_id(job, f"/runs/{job}.html"))
    assert f'<a href="/runs/{job}.html"><code class="id" title="{job}">a8c801bc</code></a>' in html
    assert f'data-copy="{job}"' in html
