"""Evaluate a program on examples: parallel, resumable, one JSON line per example.

``runs/NAME/results.jsonl`` receives one line per finished example (prediction, metric
scores, cost trace, error) as soon as it finishes, flushed and fsynced, so a killed run loses
at most the examples in flight; ``resume=True`` skips the examples already recorded.
``runs/NAME/run.json`` records what the run is (program, data, metrics) so a resume into a
directory holding another program's results is refused.
"""

from __future__ import annotations

import json
import math
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ambiqa.errors import ConfigError
from ambiqa.fsutil import atomic_write_json
from ambiqa.tracing import track

MetricFn = Callable[[Any, Any], float]


@dataclass
class RunSpec:
    program: str
    data: str
    metrics: list[str]
    reader: str | None = None
    lm: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


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
        if not self.path.exists():
            return []
        rows = []
        with open(self.path, encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a torn last line from a kill: that example is simply redone
        return rows

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
        line = json.dumps(row, ensure_ascii=False) + "\n"
        with self._lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())


def evaluate(program: Any, examples: list[Any], metrics: dict[str, MetricFn], *,
             out_dir: Path | None = None, spec: RunSpec | None = None, resume: bool = False,
             threads: int = 1, max_error_rate: float = 0.5,
             progress: bool = True) -> dict[str, Any]:
    """Run ``program`` on ``examples``, score with ``metrics``, return the summary."""
    rows: list[dict[str, Any]] = []
    results: ResultsFile | None = None
    if out_dir is not None:
        out_dir = Path(out_dir)
        results = _prepare_dir(out_dir, spec, resume)
        rows = results.read() if resume else []
    done = {r["id"] for r in rows}
    todo = [(i, ex) for i, ex in enumerate(examples) if example_id(ex, i) not in done]
    lock = threading.Lock()
    errors = sum(1 for r in rows if r.get("error"))

    def run_one(item: tuple[int, Any]) -> dict[str, Any]:
        i, ex = item
        row: dict[str, Any] = {"id": example_id(ex, i), "question": ex.question}
        t0 = time.perf_counter()
        # The program's own cost is traced apart from scoring: an LM reader's calls for D-F1
        # are evaluation cost, not the program's.
        with track() as trace:
            try:
                pred = program(question=ex.question)
                row["prediction"], row["error"] = _prediction_dict(pred), None
            except Exception as exc:  # one failing example is recorded, not fatal
                pred, row["prediction"], row["metrics"] = None, None, {}
                row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        row["cost"] = trace.summary()
        row["wall_s"] = round(time.perf_counter() - t0, 3)
        if pred is not None:
            with track() as scoring:
                try:
                    row["metrics"] = {name: float(fn(ex, pred)) for name, fn in metrics.items()}
                except Exception as exc:
                    row["metrics"] = {}
                    row["error"] = f"scoring failed: {type(exc).__name__}: {exc}"[:500]
            row["scoring_cost"] = {"lm_calls": scoring.lm_calls,
                                   "input_tokens": scoring.input_tokens,
                                   "output_tokens": scoring.output_tokens}
        return row

    from ambiqa.parallel import run_parallel

    bar = _Progress(len(examples), len(rows), enabled=progress)

    def task(item):
        nonlocal errors
        row = run_one(item)
        with lock:
            rows.append(row)
            if results is not None:
                results.append(row)
            if row["error"]:
                errors += 1
            bar.update(rows)
            if len(rows) >= 4 and errors / len(rows) > max_error_rate:
                raise ConfigError(
                    f"{errors} of {len(rows)} examples failed (last: {row['error']})",
                    hint="fix the cause and rerun with --resume; finished examples are kept")
        return row

    try:
        run_parallel(task, todo, max_workers=threads)
    finally:
        bar.close()
    summary = summarize(rows, list(metrics))
    if out_dir is not None:
        atomic_write_json(out_dir / "summary.json", {"run": spec.to_dict() if spec else {},
                                                     **summary})
    return summary


def _prepare_dir(out_dir: Path, spec: RunSpec | None, resume: bool) -> ResultsFile:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create run directory {out_dir}: {exc.strerror}") from exc
    if not os.access(out_dir, os.W_OK):
        raise ConfigError(f"run directory {out_dir} is not writable")
    meta = out_dir / "run.json"
    results = ResultsFile(out_dir / "results.jsonl")
    if meta.exists():
        old = json.loads(meta.read_text(encoding="utf-8"))
        if not resume:
            raise ConfigError(f"{out_dir} already holds a run",
                              hint="pass --resume to continue it, or choose another --out")
        if spec is not None and (old.get("program"), _base(old.get("data", ""))) != (
                spec.program, _base(spec.data)):
            raise ConfigError(
                f"{out_dir} holds a run of {old.get('program')} on {old.get('data')}, "
                f"not {spec.program} on {spec.data}; refusing to mix results",
                hint="choose another --out")
        results.repair()
        if spec is not None and old.get("data") != spec.data:  # same split, other size
            atomic_write_json(meta, spec.to_dict())
    elif spec is not None:
        atomic_write_json(meta, spec.to_dict())
    return results


def _base(data_spec: str) -> str:
    """A data spec without its trailing example count: ``asqa:dev:50`` → ``asqa:dev``.

    Resuming may extend a run to more examples of the same split, never mix two splits."""
    head, _, tail = str(data_spec).rpartition(":")
    return head if head and tail.isdigit() else str(data_spec)


def bootstrap_ci(values: list[float], n: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap confidence interval of the mean."""
    if not values:
        return (math.nan, math.nan)
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(values, k=len(values))) / len(values) for _ in range(n))
    return means[int(0.025 * n)], means[int(0.975 * n) - 1]


def summarize(rows: list[dict[str, Any]], metric_names: list[str]) -> dict[str, Any]:
    ok = [r for r in rows if not r.get("error")]
    out: dict[str, Any] = {"n": len(rows), "n_errors": len(rows) - len(ok), "metrics": {},
                           "cost": {}}
    for name in metric_names:
        vals = [r["metrics"][name] for r in ok if name in r.get("metrics", {})
                and not math.isnan(r["metrics"][name])]
        lo, hi = bootstrap_ci(vals)
        out["metrics"][name] = {"mean": sum(vals) / len(vals) if vals else math.nan,
                                "ci95": [lo, hi], "n": len(vals)}
    for key in ("lm_calls", "input_tokens", "output_tokens", "retriever_calls", "wall_s",
                "critical_path_s"):
        vals = [r["cost"].get(key, 0) for r in rows if r.get("cost")]
        out["cost"][key] = sum(vals) / len(vals) if vals else 0.0
    return out


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
        self._progress.update(self._task, completed=len(rows), description=desc)

    def close(self) -> None:
        if self._progress:
            self._progress.stop()
