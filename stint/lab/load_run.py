"""One load run: the cases in order, a progress display, the matrix report at the end."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import uvloop
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from stint.lab.backends import LoadBackends
from stint.lab.environment import environment, shown_path
from stint.lab.model import CaseReport, CaseSpec
from stint.lab.report import write_case, write_matrix
from stint.lab.runner import run_case
from stint.lab.sizing_summary import sizing_summary_lines

__all__ = ["LoadSession"]


class LoadSession:
    """Shared by every case of one pytest run (a session-scoped fixture)."""

    def __init__(
        self, report_dir: Path, *, command: str, planned: int, keep_cases: bool = False
    ) -> None:
        self.report_dir = report_dir
        self.command = command
        self.keep_cases = keep_cases
        self.reports: list[CaseReport] = []
        self._backends = LoadBackends(settings=None)
        # The real terminal: pytest captures sys.stderr inside tests.
        self._console = Console(file=sys.__stderr__)
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self._console,
        )
        self._cases = self._progress.add_task("load cases", total=planned)
        self._turns = self._progress.add_task("turns", total=1)
        self._console.print(f"load matrix: {planned} cases; {self._backends.describe()}")
        if self._backends.container_unavailable:
            self._console.print(f"(no container backend: {self._backends.container_unavailable})")
        self._progress.start()

    def run(self, spec: CaseSpec) -> CaseReport:
        def progress(phase: str, finished: int, total: int) -> None:
            self._progress.update(
                self._turns,
                description=f"{spec.label} {phase}",
                completed=finished,
                total=total,
            )

        report = uvloop.run(run_case(spec, self._backends, self.report_dir / "work", progress))
        self.reports.append(report)
        write_case(self.report_dir, report.as_json())
        self._progress.advance(self._cases)
        return report

    def finish(self) -> str | None:
        """Write the matrix report; return the run's summary lines (None if nothing ran):
        where the report is, and what it sizes for the worked example."""
        self._progress.stop()
        self._backends.close()
        if not self.reports:
            return None
        backend = self.reports[0].backend
        cases = [r.as_json() for r in self.reports]
        command = self.command
        if self.keep_cases:
            kept, earlier = self._earlier_cases({c["case"]["label"] for c in cases})
            cases = kept + cases
            command = f"{earlier}\n{command}" if earlier and kept else command
        matrix = write_matrix(
            self.report_dir,
            cases,
            command=command,
            environment=environment(),
            backend=asdict(backend),
        )
        passed = sum(1 for r in self.reports if r.passed)
        return "\n".join(
            [
                f"load matrix: {len(self.reports)} cases, {passed} passed all checks; "
                f"report {shown_path(matrix.with_name('matrix.md'))}",
                *sizing_summary_lines(matrix, json.loads(matrix.read_text())),
            ]
        )

    def _earlier_cases(self, rerun: set[str]) -> tuple[list[dict[str, Any]], str | None]:
        """Cases of earlier runs in the report folder that this run did not rerun, and
        the command that made the earlier matrix (both go into the new matrix)."""
        kept = []
        for path in sorted((self.report_dir / "cases").glob("*.json")):
            case = json.loads(path.read_text())
            if case["case"]["label"] not in rerun:
                kept.append(case)
        previous = self.report_dir / "matrix.json"
        earlier = json.loads(previous.read_text()).get("command") if previous.exists() else None
        return kept, earlier
