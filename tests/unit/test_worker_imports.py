"""A worker running the scripted harness imports no pydantic: its settings are
Stint's own (``stint.config.fields``), and pydantic with pydantic-settings cost
each worker about 10 MiB of memory for nothing (docs/benchmarks.md section 11).
The agents harness and the API still import pydantic; that is theirs."""

from __future__ import annotations

from tests.imports_probe import modules_loaded

_PROBE = """
import json, sys
from pathlib import Path
from stint.config.settings import load_settings
from stint.worker.main import _metrics, build_parser
from stint.worker.harness import load_harness
import stint.worker.supervisor, stint.worker.runner, stint.worker.context, stint.worker.deliverer
settings = load_settings(health_port=int(sys.argv[1]))
build_parser().parse_args(["--slots", "2"])
load_harness(settings.harness, workspace=Path("/tmp"), settings=settings)
_metrics(settings, None, None, "v")
needless = ("pydantic", "pydantic_core", "pydantic_settings", "annotated_types", "dotenv")
print(json.dumps(sorted(m for m in needless if m in sys.modules)))
"""


def test_a_scripted_worker_imports_no_pydantic() -> None:
    assert modules_loaded(_PROBE, "0") == []
    assert modules_loaded(_PROBE, "8080") == []  # serving /metrics too
