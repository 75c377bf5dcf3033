"""``tune_eor``: fit EoR's voter weights on a cache of its members' answers (``ambiqa tune-eor``).

EoR's weights (ω^s per answer-similarity metric, ω^r per retriever, the pooling and, with
``tune_threshold``, t) are tuned with Optuna against the voted answer's score on training
questions. Only the cache of every member's answers is read -- the ``results.jsonl`` of an
``ambiqa evaluate eor`` run or a cache file -- so a study of thousands of trials makes no LM
call. ``dev_cache`` (held-out questions) is only scored, never tuned on; question ids the two
share are refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ambiqa.api.indexing import settings_from
from ambiqa.errors import ConfigError
from ambiqa.fsutil import atomic_write_json
from ambiqa.optimizers import eor_weights as ew


@dataclass(frozen=True)
class TuneEorSettings:
    #: data spec of the cache's questions when the cache does not record it
    data: str | None = None
    #: held-out questions, scored with the default and the tuned weights
    dev_cache: str | Path | None = None
    dev_data: str | None = None
    #: how the voted answer is scored against the gold answers: em, f1 or contains
    gold: str = "f1"
    #: finished trials wanted in the study in total (a rerun of a stored study tops up)
    trials: int = 2000
    seed: int = 0
    #: tune t too (default: the paper's t = 0.1)
    tune_threshold: bool = False
    study: str | None = None
    storage: str | None = None
    #: research only: allow dev/test questions as training data (the artifact records it)
    allow_eval_splits: bool = False
    #: where to write: the JSON report, a heatmap PNG of the weights, an EoR artifact
    out: str | Path | None = None
    plot: str | Path | None = None
    artifact: str | Path | None = None


@dataclass
class TuneEorResult:
    weights: dict[str, Any]
    #: objective, data, train/dev scores with the default and the tuned weights, trials...
    report: dict[str, Any]
    #: the weights side by side (Markdown), for printing
    table: str
    #: read, but skipped, cache entries by reason (no member answers, ...)
    skipped: dict[str, int] = field(default_factory=dict)
    n_train: int = 0
    written: list[Path] = field(default_factory=list)


def tune_eor(cache: str | Path, settings: TuneEorSettings | None = None,
             **overrides: Any) -> TuneEorResult:
    """Tune EoR's voter weights on ``cache``; write what ``settings`` names (report, plot,
    artifact loadable with :func:`ambiqa.load`) and return the weights and the report."""
    s = settings_from(settings, TuneEorSettings, overrides)
    train = ew.load_cache(cache, data_spec=s.data, gold_metric=s.gold)
    if not train.questions:
        raise ConfigError(f"{cache} holds no question with member answers")
    dev = (ew.load_cache(s.dev_cache, data_spec=s.dev_data, gold_metric=s.gold)
           if s.dev_cache else None)
    result = ew.tune_weights(train, trials=s.trials, seed=s.seed,
                             tune_threshold=s.tune_threshold, study=s.study, storage=s.storage,
                             allow_eval_splits=s.allow_eval_splits,
                             dev_ids=dev.ids() if dev is not None else None)
    report: dict[str, Any] = {
        "objective": s.gold, "data": train.data_spec, "cache_fingerprint": train.fingerprint(),
        "cache_stats": train.stats,
        "train": {"n": len(train.questions),
                  "default": ew.accuracy(train, ew.DEFAULT_WEIGHTS), "tuned": result.value},
        "weights": result.weights, "trials": result.trials, "ran_trials": result.ran,
        "best_trial": result.best_trial, "trials_per_s": result.trials_per_s,
        "data_guard": result.data_guard}
    if dev is not None:
        report["dev_data"] = dev.data_spec
        report["dev"] = {"n": len(dev.questions), "default": ew.accuracy(dev, ew.DEFAULT_WEIGHTS),
                         "tuned": ew.accuracy(dev, result.weights)}
    rows = {"default": ew.DEFAULT_WEIGHTS, "tuned": result.weights}
    written: list[Path] = []
    if s.out:
        atomic_write_json(Path(s.out), report)
        written.append(Path(s.out))
    if s.plot:
        written.append(ew.plot_weights(rows, train.members, Path(s.plot)))
    if s.artifact:
        written.append(ew.save_weights_artifact(s.artifact, result.weights, train, report,
                                                data_guard=result.data_guard))
    return TuneEorResult(weights=result.weights, report=report,
                         table=ew.weights_table(rows, train.members),
                         skipped={k: v for k, v in train.stats.items() if v},
                         n_train=len(train.questions), written=written)
