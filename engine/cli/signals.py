"""``engine signal JOB_ID NAME [--data JSON]``: send a signal a step of the job waits for."""

from __future__ import annotations

import json
from typing import Any

import click

from engine.cli.args import parse_job_id
from engine.cli.jobs import whoami
from engine.cli.output import err, out, print_json
from engine.cli.state import current
from engine.errors import BadInput
from engine.waits.signals import operator_signal

__all__ = ["signal"]


def _parse_data(value: str | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"invalid --data {value!r}: not JSON ({exc.msg} at character {exc.pos}); "
            """expected e.g. '{"by": "acct"}'"""
        ) from None


@click.command()
@click.argument("job_id")
@click.argument("name")
@click.option(
    "--data",
    default=None,
    help=(
        "the signal's data, one JSON value (a posting's approval needs a reason either way: "
        '\'{"decision": "approve", "reason": "..."}\' or '
        '\'{"decision": "reject", "reason": "..."}\')'
    ),
)
@click.option(
    "--by",
    "sent_by",
    envvar="ENGINE_SUBMITTED_BY",
    show_envvar=True,
    help="who sends it (recorded with the signal and in the audit trail); default user@host",
)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def signal(job_id: str, name: str, data: str | None, sent_by: str | None, as_json: bool) -> None:
    """Send signal NAME to an active job: the steps waiting for it resume.

    JOB_ID may be a unique prefix of the id (4 hex digits at least).

    NAME must be one of the signals the job's flow declares (at the version
    the job runs; `engine flows show FLOW` lists them): any other name, a
    typo, is refused (exit 2, naming the valid ones) and nothing is recorded.
    A signal is recorded once per job and name: one sent before a step waits
    for it is kept until the step asks; sending it again with the same data
    changes nothing, with other data is refused (exit 2). A signal recorded
    is recorded in the audit trail too, by --by.

    A signal the flow declares an approval (`engine flows show FLOW`) is
    refused (exit 2, recorded in the audit trail as signal_refused) from
    whoever submitted the job or its parent, from an unknown sender, or
    without a "reason" in its data (approve and reject alike).
    ENGINE_ALLOW_SELF_APPROVAL lets the submitter approve (audited, with a
    warning).
    """
    settings = current().settings
    if settings.allow_self_approval:
        err.print(
            "warning: ENGINE_ALLOW_SELF_APPROVAL is on: whoever submitted a job may approve it "
            "(each such approval is audited as self_approval)",
            highlight=False,
            markup=False,
        )
    job = parse_job_id(settings, job_id)
    sent = operator_signal(
        job, name, _parse_data(data), settings=settings, actor=sent_by or whoami()
    )
    if as_json:
        print_json(sent.as_json())
    elif sent.created:
        out.print(
            f"signal {sent.name} sent to job {sent.job_id}: "
            f"{sent.woken} waiting step run(s) resumed",
            highlight=False,
        )
    else:
        out.print(
            f"signal {sent.name} was sent to job {sent.job_id} already "
            f"(by {sent.sent_by or '-'} at {sent.at:%Y-%m-%d %H:%M:%S}); nothing changed",
            highlight=False,
        )
