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

At the end the run directory gets ``summary.json``, ``report.md`` and plots
(:mod:`ambiqa.evaluation.report`).
"""

from __future__ import annotations

import errno
import json
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ambiqa.errors import ArtifactError, ConfigError, RunError
from ambiqa.fsutil import atomic_write_json
from ambiqa.parallel import call_with_deadline
from ambiqa.tracing import track

MetricFn = Callable[[Any, Any], float]


@dataclass
class RunSpec:
    """What a run is; stored as ``run.json``. Fields after ``lm`` are optional additions and
    are left out of the file when unset, so older run directories stay byte-compatible."""

    program: str
    data: str
    metrics: list[str]
    reader: str | None = None
    lm: str | None = None
    index: str | None = None
    program_config: dict[str, Any] | None = None
    judge: str | None = None
    #: sha256 of the artifact file when the program came from one
    artifact_sha256: str | None = None
    #: the retriever's own fingerprint (its passages and settings), beyond the index name
    index_fingerprint: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    _OPTIONAL = ("index", "program_config", "judge", "artifact_sha256", "index_fingerprint")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"program": self.program, "data": self.data,
                               "metrics": list(self.metrics), "reader": self.reader,
                               "lm": self.lm}
        for key in self._OPTIONAL:
            value = getattr(self, key)
            if value not in (None, {}):
                out[key] = value
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        """Read a ``run.json`` of any ambiqa version (unknown keys are kept in ``extra``)."""
        known = {"program", "data", "metrics", "reader", "lm", *cls._OPTIONAL}
        return cls(program=str(data.get("program", "")), data=str(data.get("data", "")),
                   metrics=[str(x) for x in data.get("metrics", []) or []],
                   reader=data.get("reader"), lm=data.get("lm"), index=data.get("index"),
                   program_config=data.get("program_config"), judge=data.get("judge"),
                   artifact_sha256=data.get("artifact_sha256"),
                   index_fingerprint=data.get("index_fingerprint"),
                   extra={k: v for k, v in data.items() if k not in known})

    @property
    def dataset(self) -> str:
        """The data spec without its example count (``asqa:dev:50`` -> ``asqa:dev``)."""
        return _base(self.data)


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


def _prediction_dict(pred: Any) -> dict[str, Any]:
    keys = pred.keys() if hasattr(pred, "keys") else []
    return {k: _jsonable(pred[k]) for k in keys if k != "trace"}


class ResultsFile:
    """Append-only JSONL writer that never leaves a partial line behind on a kill."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def read(self) -> list[dict[str, Any]]:
        """The rows, one per example id (a later row for the same id replaces the earlier)."""
        if not self.path.exists():
            return []
        rows: dict[str, dict[str, Any]] = {}
        with open(self.path, encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line from a kill: that example is simply redone
                if isinstance(row, dict) and "id" in row:
                    rows.pop(str(row["id"]), None)
                    rows[str(row["id"])] = row
        return list(rows.values())

    def repair(self) -> None:
        """Drop a torn final line (killed mid-write) so appends start on a clean line."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            tmp = self.path.with_suffix(".jsonl.tmp")
            tmp.write_bytes(data[:cut])
            os.replace(tmp, self.path)

    def append(self, row: dict[str, Any]) -> None:
        """Append one row durably; a failed write (disk full, lost permission) stops the run
        with an :class:`ArtifactError`. Rows already in the file stay; a torn last line is
        dropped by :meth:`repair` on resume."""
        line = json.dumps(row, ensure_ascii=False) + "\n"
        try:
            with self._lock, open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise write_error(self.path, exc) from exc


def write_error(path: Path, exc: OSError) -> ArtifactError:
    """A one-line error for a failed write that says what was kept."""
    why = "disk full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
    return ArtifactError(f"cannot write {path}: {why}",
                         hint="free space or fix permissions, then rerun with --resume; every "
                              "row written before this one is kept")


class _RunState:
    """The rows of one run and when to stop it, shared by the worker threads under one lock.

    ``record`` appends a finished row (to memory and to ``results.jsonl``) and raises once the
    run must stop: a failed write, or more than ``max_error_rate`` failed rows once at least 4
    exist. After that, ``stopped`` is true and rows that finish later are dropped.
    """

    def __init__(self, rows: list[dict[str, Any]], results: ResultsFile | None,
                 max_error_rate: float) -> None:
        self.rows, self.results, self.max_error_rate = rows, results, max_error_rate
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
                raise RunError(
                    f"{self.errors} of {len(self.rows)} examples failed (last: {row['error']})",
                    hint="fix the cause and rerun with --resume (add --retry-errors to redo "
                         "the failed ones); finished examples are kept")
        return row


def evaluate(program: Any, examples: list[Any], metrics: dict[str, MetricFn], *,
             out_dir: Path | None = None, spec: RunSpec | None = None, resume: bool = False,
             threads: int = 1, max_error_rate: float = 0.5, progress: bool = True,
             timeout_s: float | None = None, retry_errors: bool = False,
             report: bool = True) -> dict[str, Any]:
    """Run ``program`` on ``examples``, score with ``metrics``, return the summary.

    ``timeout_s`` bounds each example (program call and scoring each get that long);
    ``retry_errors`` (with ``resume``) reruns examples whose recorded row is an error, the new
    row superseding the old one. More than ``max_error_rate`` failed rows (once at least 4
    exist) stop the run with a :class:`RunError`; finished rows stay on disk. With
    ``out_dir`` and ``report``, ``summary.json``, ``report.md`` and plots are written there.
    """
    rows: list[dict[str, Any]] = []
    results: ResultsFile | None = None
    if out_dir is not None:
        out_dir = Path(out_dir)
        results = _prepare_dir(out_dir, spec, resume)
        rows = results.read() if resume else []
    if retry_errors:
        rows = [r for r in rows if not r.get("error")]
    done = {str(r["id"]) for r in rows}
    todo = [(i, ex) for i, ex in enumerate(examples) if example_id(ex, i) not in done]
    state = _RunState(rows, results, max_error_rate)

    def run_one(item: tuple[int, Any]) -> dict[str, Any]:
        i, ex = item
        row: dict[str, Any] = {"id": example_id(ex, i), "question": ex.question}
        t0 = time.perf_counter()
        # The program's own cost is traced apart from scoring: an LM reader's calls for D-F1
        # are evaluation cost, not the program's.
        with track() as trace:
            try:
                pred = call_with_timeout(lambda: program(question=ex.question), timeout_s)
                row["prediction"], row["error"] = _prediction_dict(pred), None
            except Exception as exc:  # one failing example is recorded, not fatal
                pred, row["prediction"], row["metrics"] = None, None, {}
                kind = "Timeout" if isinstance(exc, ExampleTimeout) else type(exc).__name__
                row["error"] = f"{kind}: {exc}"[:500]
        row["cost"] = trace.summary()
        row["wall_s"] = round(time.perf_counter() - t0, 3)
        if pred is not None:
            with track() as scoring:
                try:
                    row["metrics"] = call_with_timeout(
                        lambda: score_row(ex, pred, metrics), timeout_s)
                except Exception as exc:
                    kind = "Timeout" if isinstance(exc, ExampleTimeout) else type(exc).__name__
                    row["metrics"] = {}
                    row["error"] = f"scoring failed: {kind}: {exc}"[:500]
            row["scoring_cost"] = {"lm_calls": scoring.lm_calls,
                                   "input_tokens": scoring.input_tokens,
                                   "output_tokens": scoring.output_tokens}
        return row

    from ambiqa.parallel import run_parallel

    bar = _Progress(len(examples), len(rows), enabled=progress)

    def task(item: tuple[int, Any]) -> dict[str, Any] | None:
        if state.stopped:  # the run is stopping: queued examples are not started
            return None
        return state.record(run_one(item), bar)

    try:
        run_parallel(task, todo, max_workers=threads)
    finally:
        bar.close()
    summary = summarize(rows, list(metrics))
    if out_dir is not None:
        spec_dict = spec.to_dict() if spec else {}
        if report:
            from ambiqa.evaluation.report import write_run_report

            write_run_report(out_dir, rows=rows, spec=spec, examples=examples)
        else:
            try:
                atomic_write_json(out_dir / "summary.json", {"run": spec_dict, **summary})
            except OSError as exc:
                raise write_error(out_dir / "summary.json", exc) from exc
    return summary


def _prepare_dir(out_dir: Path, spec: RunSpec | None, resume: bool) -> ResultsFile:
    ensure_writable_dir(out_dir)
    meta = out_dir / "run.json"
    results = ResultsFile(out_dir / "results.jsonl")
    old = check_run_dir(out_dir, spec, resume)
    if old is not None:
        results.repair()
        if spec is not None:
            new = spec.to_dict()
            if _count(spec.data) > _count(old.get("data", "")):
                # extended to more examples of the same split; a resume asking for fewer
                # keeps the larger spec, since results.jsonl still holds those examples
                merged = {**old, **new}
            else:  # settings an older run did not record are recorded now
                merged = {**old, **{k: v for k, v in new.items()
                                    if k not in old and v is not None}}
            if merged != old:
                _write_json(meta, merged)
    elif spec is not None:
        _write_json(meta, spec.to_dict())
    return results


def check_run_dir(out_dir: Path, spec: RunSpec | None, resume: bool,
                  skip: frozenset[str] = frozenset()) -> dict[str, Any] | None:
    """Refuse what would mix or overwrite results; read-only, so the CLI can call it before
    loading any model. A resume must share program, split and every setting in
    :data:`RESUME_FIELDS` with ``run.json`` (``skip``: fields not known yet); the error names
    each difference. Returns the existing ``run.json`` content (None for a fresh dir)."""
    out_dir = Path(out_dir)
    meta = out_dir / "run.json"
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir} is a file, not a directory",
                          hint="choose another --out")
    if not meta.exists():
        results = out_dir / "results.jsonl"
        if spec is not None and results.exists() and results.stat().st_size > 0:
            raise ConfigError(f"{out_dir} holds results.jsonl but no run.json; refusing to "
                              "mix results with a run of unknown origin",
                              hint="choose another --out")
        return None
    try:
        old = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{meta} is unreadable ({exc}); refusing to touch this run",
                            hint="choose another --out") from exc
    if not resume:
        raise ConfigError(f"{out_dir} already holds a run",
                          hint="pass --resume to continue it, or choose another --out")
    if spec is not None and (old.get("program"), _base(old.get("data", ""))) != (
            spec.program, _base(spec.data)):
        raise ConfigError(
            f"{out_dir} holds a run of {old.get('program')} on {old.get('data')}, "
            f"not {spec.program} on {spec.data}; refusing to mix results",
            hint="choose another --out")
    if spec is not None:
        diffs = spec_differences(old, spec, skip=skip)
        if diffs:
            raise ConfigError(
                f"cannot resume {out_dir}: its settings differ from this run's: "
                + "; ".join(diffs),
                hint="resume with the run's own settings (see its run.json), or choose "
                     "another --out")
    return old


#: settings a resumed run must share with the run it continues (run.json key -> label)
RESUME_FIELDS: dict[str, str] = {
    "lm": "LM", "reader": "reader", "index": "index", "index_fingerprint": "index fingerprint",
    "program_config": "program config", "artifact_sha256": "artifact hash",
    "metrics": "metric set", "judge": "judge",
}
#: fields older ambiqa versions did not record: a stored "none" there proves nothing either
#: way, so it is accepted (and the resumed run records the value)
_UNRECORDED_OK = frozenset({"index_fingerprint"})


def spec_differences(old: dict[str, Any], spec: RunSpec,
                     skip: frozenset[str] = frozenset()) -> list[str]:
    """Each setting of ``spec`` that differs from the stored ``run.json`` (``old``), as
    ``label: stored X, now Y``. ``skip`` names fields not known yet (the CLI checks the cheap
    ones before loading a model, the rest once the reader and judge exist)."""
    new = spec.to_dict()
    out = []
    for key, label in RESUME_FIELDS.items():
        if key in skip:
            continue
        was, now = old.get(key), new.get(key)
        if key == "metrics":
            was, now = sorted(was or []), sorted(now or [])
        if was in ({}, []):
            was = None
        if was is None and key in _UNRECORDED_OK:
            continue
        if now in ({}, []):
            now = None
        if key == "program_config" and was and now:
            was = _with_added_defaults(spec.program, was, now)
        if was != now:
            out.append(f"{label}: stored {_show(was)}, now {_show(now)}")
    return out


def _with_added_defaults(program: str, was: dict[str, Any],
                         now: dict[str, Any]) -> dict[str, Any]:
    """``was`` plus each setting a newer ambiqa added to ``program`` since the run was stored,
    at the value the constructor defaults it to: a run made before the setting existed
    behaved as that default (e.g. ``answer_form="long"``), so resuming it is sound. A new
    setting at any other value still counts as a difference."""
    import inspect

    from ambiqa.programs.registry import program_class

    try:
        params = inspect.signature(program_class(program).__init__).parameters
    except Exception:  # an artifact path or unknown program: compare as stored
        return was
    filled = dict(was)
    for name, value in now.items():
        param = params.get(name)
        if name not in was and param is not None and param.default == value:
            filled[name] = value
    return filled


def _show(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, list):
        return ",".join(map(str, value))
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return repr(value) if isinstance(value, str) else str(value)


def _write_json(path: Path, obj: Any) -> None:
    try:
        atomic_write_json(path, obj)
    except OSError as exc:
        raise write_error(path, exc) from exc


def ensure_writable_dir(out_dir: Path) -> None:
    """Create ``out_dir`` if needed and prove it takes a file; a clear ConfigError if not."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir} is a file, not a directory",
                          hint="choose another --out")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create run directory {out_dir}: "
                          f"{exc.strerror or exc}", hint="choose another --out") from exc
    _check_writable(out_dir)


def _check_writable(out_dir: Path) -> None:
    """Probe with a real file: ``os.access`` says yes to root even on a read-only mount."""
    try:
        fd, probe = tempfile.mkstemp(dir=out_dir, prefix=".write-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        why = "disk full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        raise ConfigError(f"run directory {out_dir} is not writable: {why}",
                          hint="choose another --out") from exc


def _count(data_spec: str) -> float:
    """The example count of a data spec (``asqa:dev:50`` → 50); a whole split counts as ∞."""
    tail = str(data_spec).rpartition(":")[2]
    return int(tail) if tail.isdigit() else float("inf")


def _base(data_spec: str) -> str:
    """A data spec without its trailing example count: ``asqa:dev:50`` → ``asqa:dev``.

    Resuming may extend a run to more examples of the same split, never mix two splits."""
    head, _, tail = str(data_spec).rpartition(":")
    return head if head and tail.isdigit() else str(data_spec)


def summarize(rows: list[dict[str, Any]], metric_names: list[str]) -> dict[str, Any]:
    """Per-metric headline with a 95% BCa bootstrap interval, and cost per question.

    Every row counts: a failed example scores 0 in the headline ``mean`` (and its interval);
    ``mean_excl_failed`` over the examples that did not fail sits beside it. Set-level metrics
    (DR) are computed from the set means of their parts, as the ASQA scorer does
    (:mod:`ambiqa.evaluation.stats`). Cost means are over every example, failed ones included:
    they cost too.
    """
    from ambiqa.evaluation.stats import summarize_metric

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
    return out


def score_row(example: Any, pred: Any, metrics: dict[str, MetricFn]) -> dict[str, float]:
    """One example's per-question scores.

    A set-level metric (DR) has no per-question value in the headline: the row keeps its
    parts (D-F1, ROUGE-L) and, for plots, the per-question root under ``dr_q``, computed from
    the parts already scored (the reader is not asked twice).
    """
    from ambiqa.evaluation.registry import canonical_name
    from ambiqa.evaluation.stats import PER_QUESTION_NAME, SET_LEVEL, set_level_name

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
