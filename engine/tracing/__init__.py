"""Traces from submit to checkpoint (OpenTelemetry), off unless the ``OTEL_*`` settings say so.

A job's path is one trace. ``engine.submit`` opens a span (a child of the
caller's, if the caller traces) and writes its W3C ``traceparent`` on the
job row (migration 0033); every claim reads that row, so each attempt finds
its submit's context whichever transport delivered it and whoever reclaims
it. Each attempt is a span, a child of and linked to the submit's, with the
job, flow, step, attempt and the fence's outcome as attributes; reclaims,
lease losses and releases (every event the attempt records) are its span
events. The engine's psycopg statements under a span are its child spans;
the step's own statements are folded into one child span per chunk (the
work between two ``ctx.check()`` calls), however many it runs.

Switched on by the standard settings, read as the OpenTelemetry SDK reads
them: ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console`` or ``none``; unset is
off), ``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_SERVICE_NAME``,
``OTEL_SDK_DISABLED``. Off, nothing of OpenTelemetry is imported: the
runner's seams (:class:`~engine.runner.attempt.Attempt`'s ``trace``, the
slot's ``traces``) hold the no-op values of :mod:`.noop`.

On, an attempt's spans are recorded as small tuples, not the SDK's span
objects, and the OTLP encoding and export run in a child process (the
worker's interpreter does the minimum; the SDK's ``BatchSpanProcessor`` cost
it more than a third of its no-op steps/s).

- :mod:`.switch`: on or off, and the one recording of the process;
- :mod:`.noop`: what the seams hold when tracing is off;
- :mod:`.spans`: an attempt's span and the submit's (imports OpenTelemetry);
- :mod:`.statements`: psycopg statements as child spans;
- :mod:`.wire`: a finished span as a compact record, and back into the SDK's;
- :mod:`.export`: where records go: the exporter process, or a caller's provider;
- :mod:`.exporter`: the exporter process's program;
- :mod:`.setup`: the SDK's provider and exporters from the ``OTEL_*`` settings.
"""

# the package's names are its modules' ``__all__``, written once where each name is defined
from engine.tracing.noop import *  # noqa: F403
from engine.tracing.switch import *  # noqa: F403
