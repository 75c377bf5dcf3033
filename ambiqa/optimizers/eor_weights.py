"""Tune EoR's voter (Li et al. 2024, Sec. 4.2) over cached answers: no LM call per trial.

EoR answers once per pool member and votes (:func:`ambiqa.programs.eor.vote`). The vote
depends only on the member answers and their pairwise similarities, which an EoR prediction
records (``member_answers``, ``similarities``), so the weights can be searched offline:

1. **Cache** the per-member answers and similarity matrices of training questions, with
   their gold answers: from an evaluation run's ``results.jsonl`` (the EoR predictions are in
   it; gold answers come from the data spec, joined by example id) with :func:`load_cache`,
   or by a dedicated pass with :func:`collect_cache`, which runs EoR with every member active.
2. **Search** with Optuna (TPE): metric weights ω^s ∈ [0, 0.6] per similarity metric,
   retriever weights ω^r ∈ [0, 0.6] per member (the paper's upper bound, "to prevent
   over-reliance on a single retriever"), the threshold t (the paper's 0.1, fixed unless
   ``tune_threshold``) and the pooling function (mean, max, majority, plurality). The paper
   used Nelder-Mead and fixed mean pooling; TPE handles the categorical pooling and the
   threshold's discontinuity directly. The objective is the mean correctness of the winning
   answer on the cached questions: token F1 against the gold answers by default (``em`` or
   ``contains`` as options; the paper used BEM, which needs a model not available here).
   Training data only: a cache made from a dev/test split (its data spec, from ``run.json``
   or the cache file) or sharing question ids with the dev cache is refused unless
   ``allow_eval_splits``; a persistent study records the cache fingerprint, data spec and
   search space and refuses to resume on another.
3. Each trial is one vectorized vote over all cached questions (numpy; :func:`vote_batch`,
   equal to :func:`~ambiqa.programs.eor.vote` question by question, which a test checks), so
   thousands of trials take seconds -- mostly the sampler's own time.

Steps 1 and 3 (the cache and the vectorized voter) live in :mod:`ambiqa.optimizers.eor_cache`,
re-exported here; this module is the search, the artifact and the report.

The tuned weights load into the program as constructor settings (:func:`eor_config`,
``EoR(retriever, **config)``) or as an artifact (:func:`save_weights_artifact`, then
``ambiqa.load(path, retriever=..., program_kwargs={"sources": {...}})``). Report them with
:func:`weights_table` (Markdown) and :func:`plot_weights` (a heatmap like the paper's Fig. 6).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ambiqa.checks import check_int
from ambiqa.errors import ConfigError
from ambiqa.fsutil import atomic_write
from ambiqa.optimizers.artifact import save_artifact
from ambiqa.optimizers.eor_cache import (
    CACHE_FORMAT,
    GOLD_METRICS,
    Cache,
    accuracy,
    collect_cache,
    eor_default,
    load_cache,
    vote_batch,
)
from ambiqa.optimizers.manifest import NO_RETRIEVER, Manifest
from ambiqa.optimizers.splits import check_training_data
from ambiqa.programs.eor import DEFAULT_METRIC_WEIGHTS, DEFAULT_THRESHOLD, METRICS, POOLINGS, EoR

__all__ = [
    "CACHE_FORMAT", "DEFAULT_WEIGHTS", "GOLD_METRICS", "SAMPLERS", "UPPER", "Cache",
    "WeightsResult", "accuracy", "collect_cache", "eor_config", "eor_search_space",
    "load_cache", "plot_weights", "save_weights_artifact", "tune_weights", "vote_batch",
    "weights_from_params", "weights_table",
]

UPPER = 0.6  # the paper's upper bound for ω^s and ω^r
DEFAULT_WEIGHTS: dict[str, Any] = {"metric_weights": dict(DEFAULT_METRIC_WEIGHTS),
                                   "retriever_weights": {}, "threshold": DEFAULT_THRESHOLD,
                                   "pooling": "mean", "equivalence": 0.5}


# ---- the search ---------------------------------------------------------------------------------
@dataclass
class WeightsResult:
    weights: dict[str, Any]
    value: float
    trials: int
    seconds: float
    #: trials run by this call (``trials`` counts the whole study)
    ran: int = 0
    #: the training-split guard's record (see :mod:`ambiqa.optimizers.splits`)
    data_guard: dict[str, Any] = field(default_factory=dict)
    best_trial: int | None = None

    @property
    def trials_per_s(self) -> float:
        return round(self.ran / self.seconds, 1) if self.seconds > 0 else math.inf


def weights_from_params(params: dict[str, Any], cache: Cache,
                        threshold: float = DEFAULT_THRESHOLD) -> dict[str, Any]:
    return {"metric_weights": {m: round(params[f"ws.{m}"], 6) for m in cache.metrics},
            "retriever_weights": {s: round(params[f"wr.{s}"], 6) for s in cache.members},
            "threshold": round(params.get("t", threshold), 6),
            "pooling": params.get("pooling", "mean"),
            "equivalence": 0.5}


SAMPLERS = ("auto", "tpe", "qmc", "random")
TPE_TAIL = 100
STUDY_ATTR = "ambiqa_eor"


def eor_search_space(cache: Cache, tune_threshold: bool, poolings: tuple[str, ...],
                     ) -> dict[str, Any]:
    """What makes two runs' trials comparable (stored in a persistent study)."""
    return {"metrics": list(cache.metrics), "members": list(cache.members),
            "poolings": list(poolings), "tune_threshold": bool(tune_threshold),
            "upper": UPPER, "threshold": DEFAULT_THRESHOLD, "objective": cache.gold_metric}


def _check_study(st: Any, identity: dict[str, Any]) -> None:
    """Store ``identity`` in a new study; refuse to resume one made on another cache, data
    spec or search space (its trials' values would not be comparable)."""
    stored = st.user_attrs.get(STUDY_ATTR)
    if stored is None:
        if st.trials:
            raise ConfigError(f"study {st.study_name!r} has trials but was not made by "
                              "`ambiqa tune-eor`", hint="pick another --study name")
        st.set_user_attr(STUDY_ATTR, identity)
        return
    want = json.loads(json.dumps(identity))
    diff = sorted(k for k in set(stored) | set(want) if stored.get(k) != want.get(k))
    if diff:
        details = "; ".join(f"{k}: study has {stored.get(k)!r}, this run {want.get(k)!r}"
                            for k in diff if k != "search_space")
        if "search_space" in diff:
            details = "; ".join(filter(None, [details, "search space differs"]))
        raise ConfigError(f"study {st.study_name!r} was made on another cache or search space "
                          f"({details})",
                          hint="rerun with the original cache and settings, or pick a new "
                               "--study name")


def tune_weights(cache: Cache, *, trials: int = 2000, seed: int = 0,
                 tune_threshold: bool = False, poolings: tuple[str, ...] = POOLINGS,
                 study: str | None = None, storage: str | None = None,
                 sampler: str = "auto", allow_eval_splits: bool = False,
                 dev_ids: list[str] | None = None) -> WeightsResult:
    """Optuna search over ω^s, ω^r (≤ 0.6), pooling (and t); returns the best weights.

    The objective is the cache's ``gold_metric`` (default token F1; EM or containment as
    options) of the voted answer, averaged over the cached questions.

    Training data only: a cache whose data spec is a dev/test split, or whose question ids
    appear in ``dev_ids``, is refused unless ``allow_eval_splits`` (then recorded in
    ``data_guard``).

    ``sampler``: ``tpe``; ``qmc`` (Sobol) or ``random``; ``auto`` (default) = TPE for up to
    100 trials, else quasi-random exploration for all but the last 100 trials and TPE
    (which sees the whole history) for those. Why: a trial's vote costs ~0.1 ms, but TPE's
    own sampling grows with the history (about 30 ms per trial at 1,500 trials on 2 shared
    cores), so pure TPE manages tens of trials per second where ``auto`` manages hundreds.

    In-memory study unless ``storage`` (any Optuna RDB URL) is given. A persistent study
    stores the cache fingerprint, data spec and search space, refuses to resume on another,
    and a rerun tops it up to ``trials`` finished trials in total. The default weights are
    enqueued as the study's first trial, so the result is never worse than them on the cache
    (rescaled into the bounds: equal ω^s and ω^r = 0.6, which votes identically).
    """
    if sampler not in SAMPLERS:
        raise ConfigError(f"unknown sampler {sampler!r}", hint=f"choose from {SAMPLERS}")
    check_int("--trials", trials)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if not cache.questions:
        raise ConfigError("the EoR cache holds no questions with member answers")
    if not cache.metrics:
        raise ConfigError("the EoR cache has no similarity metric common to all questions")
    specs = [x for x in (cache.data_spec or "").split(",") if x]
    guard: dict[str, Any] = {"violations": []}
    for spec in specs or [None]:
        rec = check_training_data(spec=spec, train_ids=cache.ids(), dev_ids=dev_ids,
                                  allow_eval_splits=allow_eval_splits,
                                  what="tuning EoR voter weights")
        guard = {**rec, "violations": guard["violations"] + [
            v for v in rec["violations"] if v not in guard["violations"]]}
    tpe = optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(50, max(5, trials // 20)))
    import warnings

    with warnings.catch_warnings():  # QMC is "experimental" in Optuna 5
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        explore = (optuna.samplers.RandomSampler(seed=seed) if sampler == "random"
                   else optuna.samplers.QMCSampler(seed=seed, warn_independent_sampling=False))
    n_explore = {"tpe": 0, "qmc": trials, "random": trials,
                 "auto": max(0, trials - TPE_TAIL)}[sampler]
    st = optuna.create_study(study_name=study, storage=storage, direction="maximize",
                             sampler=explore if n_explore else tpe,
                             load_if_exists=bool(study and storage))
    if storage:
        _check_study(st, {"cache_fingerprint": cache.fingerprint(),
                          "data_spec": cache.data_spec,
                          "search_space": eor_search_space(cache, tune_threshold, poolings)})
    default = {f"ws.{m}": UPPER * (1.0 if m in DEFAULT_METRIC_WEIGHTS else 0.0)
               for m in cache.metrics}
    default.update({f"wr.{s}": UPPER for s in cache.members}, pooling="mean")
    if tune_threshold:
        default["t"] = DEFAULT_THRESHOLD
    if not st.trials:
        st.enqueue_trial(default)

    def objective(trial: Any) -> float:
        params = {f"ws.{m}": trial.suggest_float(f"ws.{m}", 0.0, UPPER) for m in cache.metrics}
        params.update({f"wr.{s}": trial.suggest_float(f"wr.{s}", 0.0, UPPER)
                       for s in cache.members})
        params["pooling"] = trial.suggest_categorical("pooling", list(poolings))
        if tune_threshold:
            params["t"] = trial.suggest_float("t", 0.0, 0.3)
        return accuracy(cache, weights_from_params(params, cache))

    def complete() -> int:
        return sum(t.state == optuna.trial.TrialState.COMPLETE
                   for t in st.get_trials(deepcopy=False))

    done = complete()
    todo = max(0, trials - done)
    explore_left = min(todo, max(0, n_explore - done))
    start = time.perf_counter()
    if explore_left:
        st.sampler = explore
        st.optimize(objective, n_trials=explore_left)
    if todo - explore_left:
        st.sampler = tpe
        st.optimize(objective, n_trials=todo - explore_left)
    seconds = time.perf_counter() - start
    best = st.best_trial
    return WeightsResult(weights_from_params(best.params, cache), float(best.value), complete(),
                         seconds, ran=todo, data_guard=guard, best_trial=best.number)


# ---- using and reporting the weights ----------------------------------------------------------
def eor_config(weights: dict[str, Any], members: list[str] | None = None) -> dict[str, Any]:
    """EoR constructor settings for ``weights`` (``EoR(retriever, **config)``)."""
    cfg = {"metric_weights": dict(weights["metric_weights"]),
           "retriever_weights": dict(weights.get("retriever_weights") or {}),
           "threshold": float(weights.get("threshold", DEFAULT_THRESHOLD)),
           "pooling": weights.get("pooling", "mean"),
           "equivalence": float(weights.get("equivalence", 0.5))}
    if members:
        cfg["pool"] = list(members)
    return cfg


def save_weights_artifact(path: str | Path, weights: dict[str, Any], cache: Cache,
                          report: dict[str, Any] | None = None,
                          data_guard: dict[str, Any] | None = None) -> Path:
    """An EoR artifact whose program config carries the tuned weights (no demos).

    The manifest records what the weights are only valid for: the pool and its rerank depth,
    the reader LM that wrote the member answers, the sources behind the members, the cache
    fingerprint and data spec, and the objective. :func:`ambiqa.optimizers.artifact.
    check_eor_pool` refuses to apply them to another pool.
    """
    meta = cache.meta or {}
    depth = meta.get("rerank_depth") or eor_default("rerank_depth")
    program = EoR(retriever=None, similarity_metrics=tuple(cache.metrics), rerank_depth=depth,
                  **eor_config(weights, cache.members))
    report = report or {}
    manifest = Manifest(
        program="eor", program_config=program.config(), lm=meta.get("lm"),
        retriever=dict(NO_RETRIEVER), metric=cache.gold_metric, reader=meta.get("reader"),
        train=cache.data_spec, dev=report.get("dev_data"),
        scores={"train": report.get("train"), "dev": report.get("dev")},
        optimizer={"name": "eor-weights", "upper_bound": UPPER,
                   "objective": cache.gold_metric, "trials": report.get("trials"),
                   "pool": list(cache.members), "rerank_depth": depth,
                   "reader_lm": meta.get("lm"), "sources": meta.get("sources"),
                   "cache": cache.source, "cache_fingerprint": cache.fingerprint(),
                   "cache_stats": cache.stats,
                   "note": "voter weights tuned over cached member answers; no demos"},
        optuna=None, demos_per_predictor={}, compile_cost={"lm_calls": 0},
        data_guard=data_guard)
    return save_artifact(path, program, manifest)


def weights_table(rows: dict[str, dict[str, Any]], members: list[str]) -> str:
    """Markdown: one row per weight set, columns ω^s per metric, ω^r per member, t, pooling."""
    metrics = sorted({m for w in rows.values() for m in (w.get("metric_weights") or {})},
                     key=lambda m: METRICS.index(m) if m in METRICS else 99)
    head = ["weights", *[f"ω^s {m}" for m in metrics], *[f"ω^r {s}" for s in members], "t",
            "pooling"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, w in rows.items():
        rw = w.get("retriever_weights") or {}
        cells = [label, *[f"{(w.get('metric_weights') or {}).get(m, 0.0):.3f}" for m in metrics],
                 *[f"{rw.get(s, 1.0):.3f}" for s in members],
                 f"{w.get('threshold', DEFAULT_THRESHOLD):.2f}", str(w.get("pooling", "mean"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_weights(rows: dict[str, dict[str, Any]], members: list[str], path: str | Path) -> Path:
    """Heatmap of retriever weights (rows: weight sets, columns: members), like EoR Fig. 6,
    with the metric weights beside it. Colours are relative to each row's largest weight
    (defaults are 1.0, tuned ones at most 0.6); cells print the raw values; members at or
    below the threshold are hatched out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(rows)
    metrics = [m for m in METRICS if any(m in (w.get("metric_weights") or {})
                                         for w in rows.values())]
    wr = np.array([[float((rows[r].get("retriever_weights") or {}).get(s, 1.0))
                    for s in members] for r in labels])
    ws = np.array([[float((rows[r].get("metric_weights") or {}).get(m, 0.0)) for m in metrics]
                   for r in labels])

    def rel(a: np.ndarray) -> np.ndarray:
        top = a.max(axis=1, keepdims=True) if a.size else a
        return np.divide(a, top, out=np.zeros_like(a), where=top > 0)

    fig, axes = plt.subplots(1, 2, figsize=(2 + 1.1 * (len(members) + len(metrics)),
                                            1.2 + 0.6 * len(labels)),
                             gridspec_kw={"width_ratios": [max(1, len(members)),
                                                           max(1, len(metrics))]})
    for ax, data, cols, title in ((axes[0], wr, members, "retriever weight ω^r"),
                                  (axes[1], ws, metrics, "metric weight ω^s")):
        ax.imshow(rel(data), cmap="Blues", vmin=0, vmax=1, aspect="auto")
        ax.set_xticks(range(len(cols)), cols, rotation=35, ha="right", fontsize=8)
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.set_title(title, fontsize=9)
        for i in range(data.shape[0]):
            for j in range(data.shape[1]):
                ax.text(j, i, f"{data[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if rel(data)[i, j] > 0.6 else "black")
    for i, label in enumerate(labels):
        t = float(rows[label].get("threshold", DEFAULT_THRESHOLD))
        for j in range(len(members)):
            if wr[i, j] <= t:
                axes[0].add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False,
                                                hatch="//", edgecolor="grey", lw=0))
    fig.tight_layout()
    path = Path(path)

    def write(fh: Any) -> None:
        fig.savefig(fh, format="png", dpi=120)

    atomic_write(path, write, mode="wb")
    plt.close(fig)
    return path
