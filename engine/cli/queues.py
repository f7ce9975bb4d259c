"""``engine queues create``: the SQS step queue and its dead-letter queue.

A thin command over :func:`engine.transports.sqs_queues.create_queues`. Exit codes
as in :mod:`engine.cli.main`: 2 bad input, 3 the environment is wrong (no
credentials, SQS unreachable, a bad ``ENGINE_*`` setting).
"""

from __future__ import annotations

import json

import click

from engine.config import Settings
from engine.transports.sqs import SqsSettings
from engine.transports.sqs_queues import create_queues

__all__ = ["queues"]


@click.group()
def queues() -> None:
    """SQS queues of the sqs transport."""


@queues.command("create")
@click.option(
    "--name",
    default=None,
    envvar="ENGINE_SQS_QUEUE_NAME",
    show_envvar=True,
    help="queue name; its dead-letter queue is NAME-dlq  [default: engine-steps]",
)
@click.option(
    "--max-receive-count",
    type=click.IntRange(1, 1000),
    default=None,
    envvar="ENGINE_SQS_MAX_RECEIVE_COUNT",
    show_envvar=True,
    help="receives after which SQS moves a message to the dead-letter queue  [default: 5]",
)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def create(name: str | None, max_receive_count: int | None, as_json: bool) -> None:
    """Create the queue and its dead-letter queue (redrive policy); print their URLs.

    Idempotent: existing queues keep their URLs and get the configured
    attributes (visibility timeout from ENGINE_VISIBILITY_S, redrive policy).
    """
    settings = Settings()
    sqs = SqsSettings()
    if max_receive_count is not None:
        sqs = sqs.model_copy(update={"max_receive_count": max_receive_count})
    made = create_queues(sqs, visibility_s=settings.visibility_s, name=name)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "queue_name": made.name,
                    "queue_url": made.url,
                    "dlq_name": made.dlq_name,
                    "dlq_url": made.dlq_url,
                    "max_receive_count": made.max_receive_count,
                    "visibility_s": made.visibility_s,
                },
                sort_keys=True,
            )
        )
        return
    click.echo(f"queue              {made.url}")
    click.echo(f"dead-letter queue  {made.dlq_url}")
    click.echo(
        f"redrive after {made.max_receive_count} receives; visibility timeout {made.visibility_s} s"
    )
    click.echo(f"ENGINE_SQS_QUEUE_URL={made.url}")
    click.echo(f"ENGINE_SQS_DLQ_URL={made.dlq_url}")
