"""The SDK's tracer provider and exporters, from the ``OTEL_*`` settings (tracing on only).

Read as the OpenTelemetry SDK reads them: ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` by ``Resource.create``, ``OTEL_TRACES_SAMPLER``
by the provider, ``OTEL_BSP_*`` by the batch processor, the
``OTEL_EXPORTER_OTLP_*`` endpoint, headers and timeout by the OTLP exporter.
``OTEL_TRACES_EXPORTER`` names the exporters (comma-separated): ``otlp``
(``http/protobuf``; ``grpc`` when its exporter package is installed) or
``console`` (on stderr, where it cannot mix with a command's ``--json``).
A process whose global provider is set already (an ERP API that traces)
keeps it: the engine's spans join the caller's.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)

from engine.errors import ConfigError

__all__ = ["tracer_from_env", "tracer_of"]

EXPORTERS = ("otlp", "console", "none")
PROTOCOLS = ("http/protobuf", "grpc")
_SCOPE = "erp-engine"


def tracer_of(provider: trace.TracerProvider) -> trace.Tracer:
    """The engine's tracer from ``provider``; psycopg statements traced from now on."""
    from engine.tracing import statements

    tracer = provider.get_tracer(_SCOPE)
    statements.install(tracer)
    return tracer


def tracer_from_env(env: Mapping[str, str]) -> trace.Tracer:
    """The engine's tracer, exporting as ``env`` says (the global provider's, if one is set)."""
    processors = [BatchSpanProcessor(exporter) for exporter in exporters(env)]
    existing = trace.get_tracer_provider()
    if isinstance(existing, TracerProvider):
        return tracer_of(existing)
    provider = TracerProvider(resource=Resource.create())
    for processor in processors:
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    return tracer_of(trace.get_tracer_provider())


def exporters(env: Mapping[str, str]) -> list[SpanExporter]:
    """The exporters ``OTEL_TRACES_EXPORTER`` names; a clear error for one not known."""
    made: list[SpanExporter] = []
    for name in (n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",")):
        if not name or name == "none":
            continue
        if name == "console":
            # on stderr, not the SDK's stdout: `engine submit --json` prints its answer there
            made.append(
                ConsoleSpanExporter(service_name=env.get("OTEL_SERVICE_NAME"), out=sys.stderr)
            )
        elif name == "otlp":
            made.append(_otlp(env))
        else:
            raise ConfigError(
                f"OTEL_TRACES_EXPORTER={name!r} is not an exporter the engine has; "
                f"valid: {', '.join(EXPORTERS)}"
            )
    return made


def _otlp(env: Mapping[str, str]) -> SpanExporter:
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError as exc:
            raise ConfigError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc "
                "installed; or use http/protobuf (the engine's tracing extra)"
            ) from exc
        grpc: SpanExporter = GrpcExporter()
        return grpc
    raise ConfigError(
        f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not one the engine exports; "
        f"valid: {', '.join(PROTOCOLS)}"
    )
