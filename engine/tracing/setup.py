"""The SDK's tracer provider and exporters, from the ``OTEL_*`` settings (tracing on only).

Read as the OpenTelemetry SDK reads them: ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` by ``Resource.create``, ``OTEL_TRACES_SAMPLER``
by the provider, ``OTEL_BSP_*`` by the batch processor, the
``OTEL_EXPORTER_OTLP_*`` endpoint, headers and timeout by the OTLP exporter.
``OTEL_TRACES_EXPORTER`` names the exporters (comma-separated): ``otlp``
(``http/protobuf``; ``grpc`` when its exporter package is installed) or
``console`` (on stderr, where it cannot mix with a command's ``--json``).
A process whose global provider is set already (an ERP API that traces)
keeps it: the engine's spans join the caller's, through its processors.
Otherwise the exporters run in a separate process (:mod:`.export`,
:mod:`.exporter`), with the batch processor's ``OTEL_BSP_*`` bounds.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExporter

from engine.errors import ConfigError
from engine.tracing.export import (
    ExporterProcess,
    ForwardingProcessor,
    ProcessSink,
    ProviderSink,
    Sink,
)
from engine.tracing.spans import Recording
from engine.tracing.wire import SCOPE

__all__ = ["check", "exporters", "recording_from_env", "recording_of"]

EXPORTERS = ("otlp", "console", "none")
PROTOCOLS = ("http/protobuf", "grpc")


def recording_of(provider: TracerProvider, sink: Sink) -> Recording:
    """What the engine records into, on ``provider``; psycopg statements traced from now on."""
    from engine.tracing import statements

    tracer = provider.get_tracer(SCOPE)
    statements.install(tracer)
    return Recording(tracer, sink, provider.sampler)


def recording_from_env(env: Mapping[str, str]) -> Recording:
    """The engine's recording, exporting as ``env`` says: from a separate process
    (:mod:`.export`), or into the global provider if one is set."""
    check(env)
    existing = trace.get_tracer_provider()
    if isinstance(existing, TracerProvider):
        return recording_of(existing, ProviderSink(existing))
    sink = ProcessSink(
        ExporterProcess(env),
        max_queue=_int(env, "OTEL_BSP_MAX_QUEUE_SIZE", 2048),
        batch=_int(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512),
        delay_s=_int(env, "OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000,
        close_timeout_s=_int(env, "OTEL_BSP_EXPORT_TIMEOUT", 30000) / 1000,
    )
    provider = TracerProvider(resource=Resource.create())
    # the SDK's spans (a submit's, a step's own) go the same way as the attempts'
    provider.add_span_processor(ForwardingProcessor(sink))
    trace.set_tracer_provider(provider)
    return recording_of(provider, sink)


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    value = env.get(name, "").strip()
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise ConfigError(f"{name}={value!r} is not a positive whole number (default {default})")
    return number


def _names(env: Mapping[str, str]) -> list[str]:
    names = []
    for name in (n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",")):
        if not name or name == "none":
            continue
        if name not in EXPORTERS:
            raise ConfigError(
                f"OTEL_TRACES_EXPORTER={name!r} is not an exporter the engine has; "
                f"valid: {', '.join(EXPORTERS)}"
            )
        names.append(name)
    return names


def _protocol(env: Mapping[str, str]) -> str:
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol not in PROTOCOLS:
        raise ConfigError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not one the engine exports; "
            f"valid: {', '.join(PROTOCOLS)}"
        )
    if (
        protocol == "grpc"
        and importlib.util.find_spec("opentelemetry.exporter.otlp.proto.grpc") is None
    ):
        raise ConfigError(
            "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc "
            "installed; or use http/protobuf (the engine's tracing extra)"
        )
    return protocol


def check(env: Mapping[str, str]) -> None:
    """A clear error now for an exporter or protocol ``env`` names that is not known (the
    exporters themselves are made in the exporter process)."""
    if "otlp" in _names(env):
        _protocol(env)


def exporters(env: Mapping[str, str] = os.environ) -> list[SpanExporter]:
    """The exporters ``OTEL_TRACES_EXPORTER`` names; a clear error for one not known."""
    made: list[SpanExporter] = []
    for name in _names(env):
        if name == "console":
            # on stderr, not the SDK's stdout: `engine submit --json` prints its answer there
            made.append(
                ConsoleSpanExporter(service_name=env.get("OTEL_SERVICE_NAME"), out=sys.stderr)
            )
        else:
            made.append(_otlp(env))
    return made


def _otlp(env: Mapping[str, str]) -> SpanExporter:
    if _protocol(env) == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcExporter,
    )

    grpc: SpanExporter = GrpcExporter()
    return grpc
