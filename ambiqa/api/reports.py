"""Reading finished runs: ``report`` re-renders one, ``compare`` sets several side by side.

The verbs ``ambiqa report`` and ``ambiqa compare`` call, and the lines ``ambiqa evaluate``
prints about a run it just wrote (its first error, its intervals, its response-cache note);
here so that the CLI reaches the run files through the api, as it does everything else.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ambiqa.evaluation.reports.compare import compare_runs, write_comparison
from ambiqa.evaluation.reports.report import cached_line, write_run_report
from ambiqa.evaluation.runs.run_dir import ResultsFile
from ambiqa.evaluation.stats import fmt_interval

__all__ = ["cached_line", "compare", "first_error", "fmt_interval", "report"]


def report(run_dir: str | Path, *, plots: bool = True,
           out: str | Path | None = None) -> dict[str, Any]:
    """(Re)write a run's summary, report.md, report.html and plots (into ``out`` when the run
    directory is not to be written into); the summary."""
    return write_run_report(Path(run_dir), plots=plots, out_dir=out or None)


def compare(runs: Sequence[str | Path], out: str | Path, *,
            metrics: Sequence[str] | None = None, baseline: int = 0,
            quality_metric: str | None = None, cost: str = "calls",
            allow_reader_mismatch: bool = False) -> Path:
    """Paired differences of ``runs`` against ``runs[baseline]``, written into ``out``
    (compare.md, compare.html, comparison.json, plots); the path of compare.md."""
    result = compare_runs(runs, metrics=metrics, baseline=baseline,
                          allow_reader_mismatch=allow_reader_mismatch)
    return write_comparison(result, Path(out), quality_metric=quality_metric, cost=cost)


def first_error(run_dir: str | Path) -> str:
    """The first line of the run's first recorded error (``unknown`` when none is)."""
    for row in ResultsFile(Path(run_dir) / "results.jsonl").read():
        if row.get("error"):
            return str(row["error"]).splitlines()[0][:200]
    return "unknown"
