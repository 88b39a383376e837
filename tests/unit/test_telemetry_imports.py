"""Zero cost when off: a worker that exports nothing imports neither the
OpenTelemetry SDK nor its metrics module; turning each on imports it. Serving
metrics never imports prometheus_client (Stint writes the format itself)."""

from __future__ import annotations

from tests.imports_probe import modules_loaded

_PROBE = """
import json, sys
from stint.config.settings import load_settings
from stint.worker.main import _metrics
from stint.worker.telemetry import setup_tracing
import stint.worker.supervisor, stint.worker.runner, stint.worker.context
settings = load_settings(health_port=int(sys.argv[2]))
setup_tracing(sys.argv[1], service_name="probe")
_metrics(settings, None, None, "v")
heavy = ("opentelemetry.sdk", "stint.telemetry.metrics", "prometheus_client")
print(json.dumps(sorted(m for m in heavy if m in sys.modules)))
"""


def _loaded(tracing: str, health_port: int) -> list[str]:
    return modules_loaded(_PROBE, tracing, str(health_port))


def test_off_by_default_imports_neither() -> None:
    assert _loaded("off", 0) == []


def test_tracing_imports_the_sdk_and_a_health_port_the_metrics() -> None:
    assert _loaded("console", 0) == ["opentelemetry.sdk"]
    assert _loaded("off", 8080) == ["stint.telemetry.metrics"]
