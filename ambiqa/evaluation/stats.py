"""Set-level scores and their bootstrap intervals, as the papers' scorers define them.

Most metrics are means of per-question scores. DR is not: the ASQA scorer computes
``sqrt(mean D-F1 × mean ROUGE-Lsum)`` from the two *set* means (its ``ovscore``), which is
larger than the mean of per-question roots whenever the two parts vary. So a statistic here is
a function of the per-question score arrays of the whole set, and the bootstrap resamples
questions and recomputes that function (DR from the resampled set means).

Failed questions (the program raised or timed out, or scoring failed) score 0 in every
headline number: leaving them out would reward a program for crashing on hard questions.
The mean over the questions that did not fail is reported beside it, labelled.

Intervals: ``scipy.stats.bootstrap`` with BCa, 95%, resampling questions; for two runs the
resampling is paired (the same questions drawn for both). Under 3 questions no interval is
given (BCa is undefined and a percentile interval of two points means nothing); where every
value is equal the interval is that value ("degenerate"); should BCa still come out undefined
the percentile method is used. The result says which method it used.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ambiqa.evaluation.metric_names import PER_QUESTION_NAME as PER_QUESTION_NAME  # re-export
from ambiqa.evaluation.metric_names import SET_LEVEL as SET_LEVEL  # re-export
from ambiqa.evaluation.metric_names import canonical_name, parts_of, set_level_name

N_RESAMPLES = 2000
#: fewer questions than this get no interval
MIN_N = 3
CONFIDENCE = 0.95

Statistic = Callable[..., Any]


def set_value(metric: str, arrays: Sequence[Sequence[float]]) -> float:
    """The set-level score of ``metric`` from its parts' per-question arrays."""
    if not arrays or not len(arrays[0]):
        return math.nan
    means = [float(np.mean(a)) for a in arrays]
    if set_level_name(metric) == "dr":
        return math.sqrt(max(means[0], 0.0) * max(means[1], 0.0))
    return means[0]


def _statistic(metric: str) -> Statistic:
    """A vectorised ``stat(*arrays, axis)`` for scipy.stats.bootstrap."""
    if set_level_name(metric) == "dr":
        def dr(d: np.ndarray, r: np.ndarray, axis: int = -1) -> np.ndarray:
            return np.sqrt(np.clip(np.mean(d, axis=axis), 0, None)
                           * np.clip(np.mean(r, axis=axis), 0, None))
        return dr

    def mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean(x, axis=axis)
    return mean


def _diff_statistic(metric: str) -> Statistic:
    """``stat(run parts..., baseline parts..., axis)`` = run's set value − baseline's."""
    one = _statistic(metric)
    k = len(parts_of(metric))

    def diff(*arrays: np.ndarray, axis: int = -1) -> np.ndarray:
        return one(*arrays[:k], axis=axis) - one(*arrays[k:], axis=axis)
    return diff


def _bootstrap(arrays: Sequence[Sequence[float]], stat: Statistic, seed: int
               ) -> tuple[float, float, str]:
    """95% interval of ``stat`` over paired arrays: BCa, else percentile; (lo, hi, method)."""
    from scipy import stats  # heavy (~0.5 s); only a run summary with intervals needs it

    data = tuple(np.asarray(a, dtype=float) for a in arrays)
    n = len(data[0]) if data else 0
    if n == 0:
        return math.nan, math.nan, "none"
    point = float(stat(*data, axis=-1))
    if all(np.all(a == a[0]) for a in data):
        return point, point, "degenerate"  # every resample gives the same value
    if n < MIN_N:
        return math.nan, math.nan, f"none (n < {MIN_N})"
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = stats.bootstrap(data, stat, paired=True, vectorized=True,
                                  n_resamples=N_RESAMPLES, confidence_level=CONFIDENCE,
                                  method=method, rng=np.random.default_rng(seed))
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if not (math.isnan(lo) or math.isnan(hi)):
            return lo, hi, method
    return math.nan, math.nan, "none"


def metric_interval(metric: str, arrays: Sequence[Sequence[float]], seed: int = 0
                    ) -> tuple[float, float, str]:
    """95% bootstrap interval of one run's set-level ``metric`` (arrays: its parts)."""
    return _bootstrap(arrays, _statistic(metric), seed)


def paired_interval(metric: str, run: Sequence[Sequence[float]],
                    baseline: Sequence[Sequence[float]], seed: int = 0
                    ) -> tuple[float, float, str]:
    """95% paired bootstrap interval of (run − baseline) on the same questions, in order."""
    return _bootstrap(list(run) + list(baseline), _diff_statistic(metric), seed)


def is_failed(row: Mapping[str, Any]) -> bool:
    return bool(row.get("error"))


def part_arrays(rows: Sequence[Mapping[str, Any]], metric: str, *,
                include_failed: bool = True) -> tuple[list[str], list[list[float]]]:
    """(ids, one array per part) over the rows that can be scored for ``metric``, in id order.

    A failed row scores 0 on every part (``include_failed``) or is left out. A row that did
    not fail but lacks a part (or has NaN there: the metric does not apply) is left out, and
    so is a failed row whose ``scored_by`` (a row of a file mixing short-answer and ambiguous
    rows: the metrics of its kind) lacks a part: it would never have had that score.
    """
    parts = parts_of(metric)
    ids: list[str] = []
    arrays: list[list[float]] = [[] for _ in parts]
    # in id order, so an interval does not depend on the order rows were written in
    for r in sorted(rows, key=lambda row: str(row["id"])):
        if is_failed(r):
            own = r.get("scored_by")
            if not include_failed or (isinstance(own, list) and not all(
                    p in own or any(canonical_name(str(o)) == p for o in own)
                    for p in parts)):
                continue
            values = [0.0] * len(parts)
        else:
            got = r.get("metrics") or {}
            values = [_num(got[p] if p in got else _canonical_get(got, p)) for p in parts]
            if any(v is None for v in values):
                continue
        ids.append(str(r["id"]))
        for a, v in zip(arrays, values, strict=True):
            a.append(float(v))  # type: ignore[arg-type]
    return ids, arrays


def _canonical_get(got: Mapping[str, Any], name: str) -> Any:
    """A row's score for ``name`` under any spelling of it (``D-F1`` for ``d-f1``)."""
    for k, v in got.items():
        if canonical_name(k) == name:
            return v
    return None


def _num(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def summarize_metric(rows: Sequence[Mapping[str, Any]], metric: str, seed: int = 0
                     ) -> dict[str, Any]:
    """A metric's headline (failed = 0) with its interval, and the excluding-failures mean.

    Keys: ``mean`` and ``ci95`` (headline), ``ci_method``, ``n`` (questions in the headline),
    ``failed`` (of those, how many failed), ``mean_excl_failed`` and ``n_scored``.
    """
    _, arrays = part_arrays(rows, metric, include_failed=True)
    _, ok = part_arrays(rows, metric, include_failed=False)
    n = len(arrays[0])
    n_scored = len(ok[0])
    lo, hi, method = metric_interval(metric, arrays, seed)
    return {"mean": set_value(metric, arrays), "ci95": [lo, hi], "ci_method": method,
            "n": n, "failed": n - n_scored, "mean_excl_failed": set_value(metric, ok),
            "n_scored": n_scored}


def paired_comparison(base_rows: Sequence[Mapping[str, Any]],
                      run_rows: Sequence[Mapping[str, Any]], metric: str, seed: int = 0
                      ) -> dict[str, Any]:
    """run − baseline on the questions both runs hold (failed = 0 on either side)."""
    a_ids, a = part_arrays(base_rows, metric)
    b_ids, b = part_arrays(run_rows, metric)
    a_at = {i: k for k, i in enumerate(a_ids)}
    b_at = {i: k for k, i in enumerate(b_ids)}
    shared = [i for i in a_ids if i in b_at]
    xa = [[arr[a_at[i]] for i in shared] for arr in a]
    xb = [[arr[b_at[i]] for i in shared] for arr in b]
    base_v, run_v = set_value(metric, xa), set_value(metric, xb)
    lo, hi, method = paired_interval(metric, xb, xa, seed)
    failed = {"baseline": sum(1 for r in base_rows if is_failed(r) and str(r["id"]) in b_at),
              "run": sum(1 for r in run_rows if is_failed(r) and str(r["id"]) in a_at)}
    return {"metric": metric, "n_shared": len(shared), "failed": failed,
            "baseline_mean": base_v, "run_mean": run_v,
            "diff": run_v - base_v if shared else math.nan, "ci95": [lo, hi],
            "ci_method": method,
            "excludes_zero": bool(shared) and not math.isnan(lo) and (lo > 0 or hi < 0)}


def fmt_interval(lo: float, hi: float, digits: int = 3) -> str:
    """``[low, high]``; ``[–]`` when undefined."""
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return "[–]"
    return f"[{lo:.{digits}f}, {hi:.{digits}f}]"
