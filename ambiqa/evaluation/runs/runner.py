"""Evaluate a program on examples: parallel, resumable, one JSON line per example.

``runs/NAME/results.jsonl`` receives one line per finished example (prediction, metric
scores, cost trace, error) as soon as it finishes, flushed and fsynced, so a killed run loses
at most the examples in flight; ``resume=True`` skips the examples already recorded.
``runs/NAME/run.json`` records what the run is (program, data, metrics, LM, reader, index and
its fingerprint, program config or artifact hash, judge) so a resume into a directory holding
another program's results, or the same program under other settings, is refused with an
error naming each difference.

Both files only ever gain fields (additive changes), so runs written by an older ambiqa
resume and render with a newer one. When one example id has several rows (an errored example
retried with ``retry_errors``), the last row counts.

Each example may get a deadline (``timeout_s``): the program runs in a worker thread and an
example that does not finish in time is recorded as an error while the run moves on. Python
cannot kill a thread, so the abandoned call keeps running in the background until it returns
(with the embedded LM, which serves one request at a time, later examples wait for it);
the deadline turns a hang into a recorded, bounded failure, not into free capacity.

At the end the run directory gets ``summary.json``, and ``report.md`` and plots when the caller
passes a report writer (:mod:`ambiqa.evaluation.reports.report`, which imports this module). The run
directory's files and the checks that guard them live in :mod:`ambiqa.evaluation.runs.run_dir`
(re-exported here); this module runs and scores.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ambiqa.errors import ArtifactError, RunError
from ambiqa.evaluation.metric_names import PER_QUESTION_NAME, SET_LEVEL, set_level_name
from ambiqa.evaluation.registry import canonical_name, row_kind, row_metrics
from ambiqa.evaluation.runs.run_dir import (
    RESUME_FIELDS,
    ResultsFile,
    RunSpec,
    check_run_dir,
    data_fingerprint,
    ensure_writable_dir,
    example_sha,
    lm_settings,
    lock_run_dir,
    prepare_run_dir,
    spec_differences,
    write_error,
)
from ambiqa.fsutil import atomic_write_json
from ambiqa.lm.redact import redact
from ambiqa.parallel import call_with_deadline, run_parallel
from ambiqa.tracing import track

__all__ = [
    "PER_ROW_ONLY", "RESUME_FIELDS", "ExampleTimeout", "MetricFn", "ResultsFile", "RunSpec",
    "call_with_timeout", "check_run_dir", "degraded_steps", "ensure_writable_dir", "evaluate",
    "example_id",
    "prediction_dict", "score_row", "spec_differences", "summarize", "write_error",
]

MetricFn = Callable[[Any, Any], float]
log = logging.getLogger(__name__)


class ExampleTimeout(Exception):
    """An example ran past its deadline (recorded as that example's error)."""


def call_with_timeout(fn: Callable[[], Any], timeout_s: float | None) -> Any:
    """``fn()``, but give up after ``timeout_s`` seconds (``None`` or 0: wait for ever).

    ``fn`` runs in a daemon thread carrying a copy of the caller's context, so DSPy settings
    and the caller's cost trace apply inside it. On timeout the thread is abandoned, not
    killed (Python cannot kill threads): whatever it records later is ignored.
    """
    return call_with_deadline(
        fn, timeout_s, error=lambda t: ExampleTimeout(f"no result after {t:g} s (abandoned)"),
        thread_name="ambiqa-example")


def _error_text(exc: BaseException, prefix: str = "") -> str:
    """A row's ``error``: the failure's class and message, credentials redacted, capped."""
    kind = "Timeout" if isinstance(exc, ExampleTimeout) else type(exc).__name__
    return redact(f"{prefix}{kind}: {exc}")[:500]


def degraded_steps(events: list[str]) -> int:
    """How many steps of one question degraded (a reply that did not parse, answered
    around): the trace events :func:`ambiqa.programs.base.safe_step` and the programs record
    as ``step: degraded: ...``."""
    return sum(1 for e in events if ": degraded" in str(e))


def example_id(example: Any, index: int) -> str:
    return str(getattr(example, "id", None) or f"ex{index}")


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump()
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, str | int | float | bool) or obj is None:
        return obj
    return str(obj)


def prediction_dict(pred: Any) -> dict[str, Any]:
    """A prediction's fields as JSON values, its cost trace left out (the row has its own)."""
    keys = pred.keys() if hasattr(pred, "keys") else []
    return {k: _jsonable(pred[k]) for k in keys if k != "trace"}


class _RunState:
    """The rows of one run and when to stop it, shared by the worker threads under one lock.

    ``record`` appends a finished row (to memory and to ``results.jsonl``) and raises once the
    run must stop: a failed write, or more than ``max_error_rate`` failed rows once at least 4
    exist. After that, ``stopped`` is true and rows that finish later are dropped.
    """

    def __init__(self, rows: list[dict[str, Any]], results: ResultsFile | None,
                 max_error_rate: float, total: int | None = None) -> None:
        self.rows, self.results, self.max_error_rate = rows, results, max_error_rate
        self.total = total
        self.errors = sum(1 for r in rows if r.get("error"))
        self.stopped = False
        self._lock = threading.Lock()

    def record(self, row: dict[str, Any], bar: _Progress) -> dict[str, Any] | None:
        with self._lock:
            if self.stopped:
                return None
            self.rows.append(row)
            try:
                if self.results is not None:
                    self.results.append(row)
            except ArtifactError:
                self.rows.pop()
                self.stopped = True
                raise
            if row["error"]:
                self.errors += 1
            bar.update(self.rows)
            if len(self.rows) >= 4 and self.errors / len(self.rows) > self.max_error_rate:
                self.stopped = True
                left = (self.total - len(self.rows)) if self.total else 0
                raise RunError(
                    f"{self.errors} of {len(self.rows)} examples failed, more than "
                    f"--max-error-rate {self.max_error_rate:g} allows; stopped"
                    + (f" with {left} not run" if left > 0 else "")
                    + f" (last: {str(row['error']).splitlines()[0][:200]})",
                    hint="fix the cause and rerun with --resume (add --retry-errors to redo "
                         "the failed ones); finished examples are kept")
        return row


#: a run-report writer, ``writer(out_dir, rows=..., spec=..., examples=...)``; the caller of
#: :func:`evaluate` passes one (:func:`ambiqa.evaluation.reports.report.write_run_report`)
ReportWriter = Callable[..., Any]


def evaluate(program: Any, examples: list[Any], metrics: dict[str, MetricFn], *,
             out_dir: Path | None = None, spec: RunSpec | None = None, resume: bool = False,
             threads: int = 1, max_error_rate: float = 0.5, progress: bool = True,
             timeout_s: float | None = None, retry_errors: bool = False,
             report: ReportWriter | None = None, spec_complete: bool = False,
             before_first: Callable[[], None] | None = None) -> dict[str, Any]:
    """Run ``program`` on ``examples``, score with ``metrics``, return the summary.

    ``before_first`` is called once, before the first question is asked, and only when one
    is left to ask (a resume of a finished run calls it not at all): the caller's warm-up.

    ``timeout_s`` bounds each example (program call and scoring each get that long);
    ``retry_errors`` (with ``resume``) reruns examples whose recorded row is an error, the new
    row superseding the old one. More than ``max_error_rate`` failed rows (once at least 4
    exist) stop the run with a :class:`RunError`; finished rows stay on disk. With
    ``out_dir``, ``summary.json`` is written there; ``report`` is the caller's report writer
    (:func:`ambiqa.evaluation.reports.report.write_run_report` writes ``summary.json``,
    ``report.md`` and plots), called as ``report(out_dir, rows=, spec=, examples=)`` while the run
    directory is still locked. The report module reads the runner's rows, so the runner never
    imports it: the caller chooses the report.

    One writer per run directory: ``out_dir`` is locked for the whole run
    (:func:`~ambiqa.evaluation.runs.run_dir.lock_run_dir`); a second process is refused with the
    holder's pid. The spec records the configured LM's max tokens, temperature and endpoint
    when the caller left them unset (``spec_complete``: the caller -- the api's plan, which
    built the LM and holds the data -- recorded those and the data fingerprint itself, so
    nothing is read back from DSPy's settings or worked out twice), and every row the hash
    of its data row, so a resume proves it continues the same run: a row whose data changed
    is run again, named.
    """
    release = None
    if out_dir is not None:
        out_dir = Path(out_dir)
        ensure_writable_dir(out_dir)
        release = lock_run_dir(out_dir)
    try:
        return _evaluate(program, examples, metrics, out_dir=out_dir, spec=spec,
                         resume=resume, threads=threads, max_error_rate=max_error_rate,
                         progress=progress, timeout_s=timeout_s, retry_errors=retry_errors,
                         report=report, spec_complete=spec_complete,
                         before_first=before_first)
    finally:
        if release is not None:
            release()


def _with_lm_settings(spec: RunSpec | None) -> RunSpec | None:
    """``spec`` with the configured LM's max tokens, temperature and endpoint filled in
    where the caller left them unset (they change answers; a resume must share them)."""
    if spec is None:
        return None
    import dataclasses

    import dspy

    found = lm_settings(dspy.settings.lm)
    fill = {k: v for k, v in found.items() if getattr(spec, k) is None}
    return dataclasses.replace(spec, **fill) if fill else spec


def _with_data_fingerprint(spec: RunSpec | None, examples: list[Any]) -> RunSpec | None:
    """``spec`` with ``data_sha`` / ``data_rows`` of ``examples`` (:func:`data_fingerprint`)
    unless the caller recorded them (a ``--part`` records those of the whole data set)."""
    if spec is None or "data_sha" in spec.extra:
        return spec
    import dataclasses

    return dataclasses.replace(spec, extra={**spec.extra, **data_fingerprint(examples)})


#: where a resume sets aside the rows it drops as stale (beside results.jsonl)
STALE_FILE = "results.stale.jsonl"


def _drop_stale(rows: list[dict[str, Any]], examples: list[Any], results: ResultsFile,
                out_dir: Path) -> list[dict[str, Any]]:
    """The recorded rows whose question is still in the data. A row whose example was
    deleted from the data file (or left this part's slice) would otherwise stay in every
    summary (n = 9 for 8 rows); it is moved to :data:`STALE_FILE` and counted in one line."""
    ids = {example_id(ex, i) for i, ex in enumerate(examples)}
    stale = {str(r["id"]) for r in rows if str(r["id"]) not in ids}
    if not stale:
        return rows
    results.drop(stale, out_dir / STALE_FILE)
    shown = sorted(stale)
    log.warning("dropped %d recorded row(s) whose question is no longer in the data (set "
                "aside in %s): %s", len(stale), STALE_FILE,
                ", ".join(shown[:20]) + (" ..." if len(shown) > 20 else ""))
    return [r for r in rows if str(r["id"]) not in stale]


def _evaluate(program: Any, examples: list[Any], metrics: dict[str, MetricFn], *,
              out_dir: Path | None, spec: RunSpec | None, resume: bool, threads: int,
              max_error_rate: float, progress: bool, timeout_s: float | None,
              retry_errors: bool, report: ReportWriter | None,
              spec_complete: bool = False,
              before_first: Callable[[], None] | None = None) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    results: ResultsFile | None = None
    if not spec_complete:
        spec = _with_data_fingerprint(_with_lm_settings(spec), examples)
    if out_dir is not None:
        results = prepare_run_dir(out_dir, spec, resume)
        rows = results.read() if resume else []
        if rows and not results.narrowed:
            rows = _drop_stale(rows, examples, results, out_dir)
    if retry_errors:
        rows = [r for r in rows if not r.get("error")]
    shas = {example_id(ex, i): example_sha(ex) for i, ex in enumerate(examples)}
    changed = sorted(str(r["id"]) for r in rows
                     if r.get("data_sha") and str(r["id"]) in shas
                     and r["data_sha"] != shas[str(r["id"])])
    if changed:
        log.warning("%d recorded example(s) changed in the data since they were run; "
                    "running them again: %s", len(changed), ", ".join(changed[:20])
                    + (" ..." if len(changed) > 20 else ""))
        rows = [r for r in rows if str(r["id"]) not in set(changed)]
    done = {str(r["id"]) for r in rows}
    todo = [(i, ex) for i, ex in enumerate(examples) if example_id(ex, i) not in done]
    if todo and before_first is not None:
        before_first()
    state = _RunState(rows, results, max_error_rate, total=len(examples))
    mixed = is_mixed(examples)

    def run_one(item: tuple[int, Any]) -> dict[str, Any]:
        i, ex = item
        row: dict[str, Any] = {"id": example_id(ex, i), "question": ex.question,
                               "data_sha": shas.get(example_id(ex, i)) or example_sha(ex)}
        own = metrics
        if mixed:  # each row by the metrics of its kind; a failed row counts in those only
            row["kind"], row["scored_by"] = row_kind(ex), row_metrics(ex, list(metrics))
            own = {name: fn for name, fn in metrics.items() if name in row["scored_by"]}
        t0 = time.perf_counter()
        # The program's own cost is traced apart from scoring: an LM reader's calls for D-F1
        # are evaluation cost, not the program's.
        with track() as trace:
            try:
                pred = call_with_timeout(lambda: program(question=ex.question), timeout_s)
                row["prediction"], row["error"] = prediction_dict(pred), None
            except Exception as exc:  # one failing example is recorded, not fatal
                # an LM that gave no reply lands here too (issue 33): an error row, counted
                # as failed, scored 0 in the headline and redone by --retry-errors
                pred, row["prediction"], row["metrics"] = None, None, {}
                row["error"] = _error_text(exc)
        row["cost"] = trace.summary()
        row["degraded_steps"] = degraded_steps(row["cost"].get("events") or [])
        row["wall_s"] = round(time.perf_counter() - t0, 3)
        if pred is not None:
            with track() as scoring:
                try:
                    row["metrics"] = call_with_timeout(
                        lambda: score_row(ex, pred, own), timeout_s)
                except Exception as exc:  # an LM reader or judge without its LM, too
                    row["metrics"] = {}
                    row["error"] = _error_text(exc, "scoring failed: ")
            row["scoring_cost"] = {"lm_calls": scoring.lm_calls,
                                   "input_tokens": scoring.input_tokens,
                                   "output_tokens": scoring.output_tokens}
        return row

    bar = _Progress(len(examples), len(rows), enabled=progress)

    def task(item: tuple[int, Any]) -> dict[str, Any] | None:
        if state.stopped:  # the run is stopping: queued examples are not started
            return None
        return state.record(run_one(item), bar)

    try:
        run_parallel(task, todo, max_workers=threads)
    except RunError:
        # stopped by --max-error-rate: the rows so far still get their summary and report,
        # so the failures can be read (report.md lists them) before the run is redone
        if out_dir is not None and report and rows:
            bar.close()
            report(out_dir, rows=rows, spec=spec, examples=examples)  # the caller's writer
        raise
    finally:
        bar.close()
    summary = summarize(rows, list(metrics))
    if out_dir is not None:
        spec_dict = spec.to_dict() if spec else {}
        if report:
            report(out_dir, rows=rows, spec=spec, examples=examples)
        else:
            try:
                atomic_write_json(out_dir / "summary.json", {"run": spec_dict, **summary})
            except OSError as exc:
                raise write_error(out_dir / "summary.json", exc) from exc
    return summary


def is_mixed(examples: list[Any]) -> bool:
    """Whether ``examples`` mix short-answer rows and ambiguous (``qa_pairs``) rows: such a
    run scores each row by the metrics of its kind (:func:`registry.row_metrics`)."""
    return len({row_kind(ex) for ex in examples}) > 1


def summarize(rows: list[dict[str, Any]], metric_names: list[str]) -> dict[str, Any]:
    """Per-metric headline with a 95% BCa bootstrap interval, and cost per question.

    ``cached`` counts the examples with an LM call answered by the response cache and those
    calls (each row's ``cost.cached_calls``).

    Every row counts: a failed example scores 0 in the headline ``mean`` (and its interval);
    ``mean_excl_failed`` over the examples that did not fail sits beside it. Set-level metrics
    (DR) are computed from the set means of their parts, as the ASQA scorer does
    (:mod:`ambiqa.evaluation.stats`). Cost means are over every example, failed ones included:
    they cost too.
    """
    from ambiqa.evaluation.stats import summarize_metric  # loads numpy

    n_errors = sum(1 for r in rows if r.get("error"))
    out: dict[str, Any] = {"n": len(rows), "n_errors": n_errors, "metrics": {}, "cost": {}}
    for name in metric_names:
        if name in PER_ROW_ONLY:
            continue
        out["metrics"][name] = summarize_metric(rows, name)
    for key in ("lm_calls", "input_tokens", "output_tokens", "retriever_calls", "wall_s",
                "critical_path_s"):
        vals = [r["cost"].get(key, 0) for r in rows if r.get("cost")]
        out["cost"][key] = sum(vals) / len(vals) if vals else 0.0
    # answers built from the response cache: the LM was not asked for them (issue 42)
    cached = [int((r.get("cost") or {}).get("cached_calls", 0) or 0) for r in rows]
    out["cached"] = {"examples": sum(1 for c in cached if c), "calls": sum(cached)}
    return out


def score_row(example: Any, pred: Any, metrics: dict[str, MetricFn]) -> dict[str, float]:
    """One example's per-question scores.

    A set-level metric (DR) has no per-question value in the headline: the row keeps its
    parts (D-F1, ROUGE-L) and, for plots, the per-question root under ``dr_q``, computed from
    the parts already scored (the reader is not asked twice).
    """
    out: dict[str, float] = {}
    set_level = {name: set_level_name(name) for name in metrics}
    for name, fn in metrics.items():
        if not set_level[name]:
            out[name] = float(fn(example, pred))
    by_canonical = {canonical_name(n): v for n, v in out.items()}
    for name, key in set_level.items():
        if not key:
            continue
        parts = SET_LEVEL[key]
        if all(p in by_canonical for p in parts):
            out[PER_QUESTION_NAME[key]] = math.sqrt(
                math.prod(max(by_canonical[p], 0.0) for p in parts))
        else:  # parts not requested: only the per-question value can be recorded
            out[PER_QUESTION_NAME[key]] = float(metrics[name](example, pred))
    return out


#: per-question keys that are not headline metrics of their own
PER_ROW_ONLY = frozenset({"dr_q"})


class _Progress:
    """A rich progress bar showing running metric means (quiet when not a terminal)."""

    def __init__(self, total: int, done: int, enabled: bool) -> None:
        self.enabled = enabled
        self._progress = None
        if enabled:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("[bold]evaluate"), BarColumn(),
                                      TextColumn("{task.completed}/{task.total}"),
                                      TimeElapsedColumn(), TextColumn("{task.description}"),
                                      transient=False)
            self._progress.start()
            self._task = self._progress.add_task("", total=total, completed=done)

    def update(self, rows: list[dict[str, Any]]) -> None:
        if not self._progress:
            return
        ok = [r for r in rows if not r.get("error")]
        means = {}
        for r in ok:
            for k, v in r.get("metrics", {}).items():
                means.setdefault(k, []).append(v)
        desc = " ".join(f"{k}={sum(v) / len(v):.3f}" for k, v in means.items())
        n_err = len(rows) - len(ok)
        if n_err:
            desc += f" [red]errors={n_err}[/red]"
        self._progress.update(self._task, completed=len(rows), description=desc)

    def close(self) -> None:
        if self._progress:
            self._progress.stop()
