"""Optuna search over demos, teleprompter, seed and program knobs (``ambiqa tune``).

What a trial chooses (TPE sampler):

* ``teleprompter`` -- where demos come from: ``labeled`` (gold demos built from the training
  data), ``bootstrap`` (traces of the program that passed the metric), ``knn`` (both pools;
  each call shows its nearest demos) or, when asked for, ``signal`` (each predictor with a
  signal of its own -- verifiers, typing, rewriting, VerDICt's read -- shows demos chosen
  against it, balanced across its classes; the others show bootstrapped traces);
* ``seed`` -- shuffles every predictor's pool;
* ``demoset.<predictor>`` -- which of ``n_sets`` candidate demo sets the predictor gets (the
  idea of DSPy's ``BootstrapFewShotWithOptuna``, which picks a bootstrapped demo per
  predictor by index), and ``demos.<predictor>`` how many of that set it shows (0..max);
* ``program.<knob>`` -- the recipe's program settings, the ones that matter for ambiguity:
  Diva's number of pseudo-interpretations (and so of verifier votes, one per reading),
  passages per reading and pruning K; ToC's tree depth, breadth (node limit), passages per
  node and self-verification prompt; VerDICt's clustering knobs; ReSP's iterations.

The demo choice and the knobs are searched jointly: one trial draws both.

The pools are built once per study, before the first trial: gold demos per signature plus
one bootstrap pass over the *train part* of the training split. They are stored in the study
(``study.user_attrs["pools"]``), so every worker and every resumed run sees the same
candidate sets and spends no LM call rebuilding them. The objective is the recipe's metric on
the *held-out part* of the training split (never a dev split), minus
``cost_penalty * cost`` where cost is LM calls per question (``cost_unit="lm_calls"``) or
thousands of tokens per question (``"tokens"``); the program's calls only, not the metric's.

Resuming, workers and storage:

* ``optuna.create_study(..., load_if_exists=True)``: rerunning the same command continues the
  study; ``--trials N`` is the total of finished (complete or pruned) trials wanted, so a
  killed run picks up where it stopped. A trial killed mid-way stays RUNNING in the storage
  until Optuna's heartbeat (60 s, grace 180 s) marks it FAIL; it does not count.
* The search space (and objective) is stored in the study; rerunning with a different one is
  refused with the differences named, rather than mixing incomparable trials.
* Any Optuna RDB URL works. Several workers on several machines share a study through one
  database server, e.g. PostgreSQL::

      createdb ambiqa_tune        # once, on the database host
      pip install psycopg2-binary # on every worker
      ambiqa tune diva --study diva-asqa --trials 60 \\
          --storage postgresql://user:PASSWORD@dbhost:5432/ambiqa_tune   # on each worker

  Each worker runs its share until the study holds 60 finished trials; the first worker to
  start builds the pools, the others read them from the study. (SQLite is fine for several
  processes on one machine; not over a network file system.)
* The best trial is written as an artifact (atomically) whenever this worker finishes a new
  best, and once more at the end from the study's best trial, whichever worker ran it
  (rebuilt from its parameters and the stored pools: no LM call).

Budget: ``max_lm_calls`` counts every LM call of this run (pools, program and metric); when
spent, the trial in progress is pruned at the next example and the study stops, keeping the
best so far.
"""

from __future__ import annotations

import json
import logging
import math
import random
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import dspy

from ambiqa.checks import check_int
from ambiqa.errors import ConfigError
from ambiqa.lm import lm_id
from ambiqa.optimizers.artifact import save_artifact
from ambiqa.optimizers.budget import Budget, BudgetExhausted
from ambiqa.optimizers.compile import SafeMetric, apply_labeled, bootstrap, score_program
from ambiqa.optimizers.demos import labeled_demos
from ambiqa.optimizers.knn import install_knn
from ambiqa.optimizers.manifest import Manifest
from ambiqa.optimizers.recipes import (
    TUNE_CHOICES,
    TUNE_TELEPROMPTERS,
    Recipe,
    get_recipe,
    split_train,
    usable_examples,
)
from ambiqa.optimizers.signals import collect_traces, signal_demos
from ambiqa.optimizers.splits import check_training_data
from ambiqa.programs.registry import build_program
from ambiqa.retrieval.factory import describe

log = logging.getLogger(__name__)

SPACE_VERSION = 1
COST_UNITS = ("lm_calls", "tokens")


@dataclass
class TuneConfig:
    program: str
    study: str
    storage: str
    trials: int = 20
    train: str = ""
    metric: str = ""
    seed: int = 0
    teleprompters: tuple[str, ...] = TUNE_TELEPROMPTERS
    max_demos: int = 3
    n_sets: int = 4
    n_seeds: int = 3
    pool_size: int = 8
    val_fraction: float = 1 / 3
    n_val: int | None = None
    cost_penalty: float = 0.0
    cost_unit: str = "lm_calls"
    max_lm_calls: int | None = None
    program_config: dict[str, Any] = field(default_factory=dict)
    tune_knobs: bool = True
    #: research only: let dev/test data through the training-split guard (recorded loudly)
    allow_eval_splits: bool = False

    def check(self, recipe: Recipe) -> None:
        check_int("--trials", self.trials)
        bad = [t for t in self.teleprompters if t not in TUNE_CHOICES]
        if bad or not self.teleprompters:
            raise ConfigError(f"teleprompters a trial can choose: {', '.join(TUNE_CHOICES)}"
                              f"; got {', '.join(self.teleprompters) or 'none'}",
                              hint="bootstrap-rs and mipro are whole searches: run them with "
                                   "`ambiqa compile`")
        if self.cost_unit not in COST_UNITS:
            raise ConfigError(f"unknown cost unit {self.cost_unit!r}",
                              hint=f"choose one of {', '.join(COST_UNITS)}")
        if not math.isfinite(self.cost_penalty) or self.cost_penalty < 0:
            raise ConfigError(f"--cost-penalty must be a finite number >= 0, got "
                              f"{self.cost_penalty!r}")
        if self.max_demos < 0 or self.n_sets < 1 or self.n_seeds < 1 or self.pool_size < 1:
            raise ConfigError("max_demos >= 0, n_sets >= 1, n_seeds >= 1 and pool_size >= 1 "
                              "are required")
        clash = set(self.program_config) & {k.name for k in recipe.knobs} \
            if self.tune_knobs else set()
        if clash:
            raise ConfigError(f"{', '.join(sorted(clash))} is both fixed (--program-config) "
                              "and tuned", hint="drop it from --program-config, or pass "
                                                "--no-knobs")


@dataclass
class TuneResult:
    study: str
    best_value: float | None
    best_params: dict[str, Any]
    best_trial: int | None
    n_complete: int
    n_pruned: int
    n_running_stale: int
    ran_trials: int
    lm_calls: int
    stopped_by_budget: bool
    artifact: str | None
    best_score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def redact_url(url: str) -> str:
    """A storage URL without its password (recorded in manifests and logs)."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def _optuna():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def make_storage(url: str) -> Any:
    """An Optuna RDB storage with heartbeats, so trials of a killed worker end up FAIL."""
    optuna = _optuna()
    if not re.match(r"^[a-z][a-z0-9+]*://", url or ""):
        raise ConfigError(f"--storage {url!r} is not a database URL",
                          hint="e.g. sqlite:///tune.db or postgresql://user:pw@host/db")
    import warnings

    url = _postgres_driver(url)
    for attempt in range(STORAGE_ATTEMPTS):
        try:
            with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna 5
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, heartbeat_interval=60, grace_period=180)
        except Exception as exc:  # bad driver, unreachable server, unwritable file
            if _schema_race(exc) and attempt + 1 < STORAGE_ATTEMPTS:
                # two workers creating a new database's tables at once: the loser sees
                # "table ... already exists"; the tables are there now, so open it again
                time.sleep(0.2 * (attempt + 1))
                continue
            raise _storage_error(url, exc) from exc
    raise AssertionError("unreachable")


#: tries to open a new study database while other workers create its tables
STORAGE_ATTEMPTS = 5


def _schema_race(exc: Exception) -> bool:
    """The errors a worker sees when another one is creating the same new database's schema
    (tables, or Optuna's alembic version row) at the same moment."""
    text = str(exc).lower()
    return any(s in text for s in ("already exists", "database is locked",
                                   "unique constraint failed: alembic_version",
                                   "duplicate key value violates unique constraint"))


def _storage_error(url: str, exc: Exception) -> ConfigError:
    return ConfigError(f"cannot open Optuna storage {redact_url(url)}: "
                       f"{type(exc).__name__}: {str(exc)[:200]}",
                       hint="check the URL, the driver (psycopg2 for PostgreSQL) and that "
                            "the directory exists")


def _postgres_driver(url: str) -> str:
    """``postgresql://`` with the driver that is installed: SQLAlchemy 2.1 maps the bare
    scheme to psycopg 3, while ``ambiqa[postgres]`` installs psycopg2."""
    import importlib.util

    if url.startswith("postgresql://") and importlib.util.find_spec("psycopg") is None \
            and importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2://" + url[len("postgresql://"):]
    return url


# ---- search space -------------------------------------------------------------------------------
def search_space(cfg: TuneConfig, recipe: Recipe, predictors: list[str]) -> dict[str, Any]:
    """Everything that makes two studies' trials comparable; stored in the study."""
    return {
        "version": SPACE_VERSION, "program": recipe.program, "train": cfg.train,
        "metric": cfg.metric, "teleprompters": list(cfg.teleprompters),
        "max_demos": cfg.max_demos, "n_sets": cfg.n_sets, "n_seeds": cfg.n_seeds,
        "pool_size": cfg.pool_size, "val_fraction": round(cfg.val_fraction, 6),
        "n_val": cfg.n_val, "predictors": predictors,
        "knobs": [k.describe() for k in recipe.knobs] if cfg.tune_knobs else [],
        "program_config": cfg.program_config,
        "objective": {"cost_penalty": cfg.cost_penalty, "cost_unit": cfg.cost_unit},
    }


def check_space(study: Any, space: dict[str, Any]) -> None:
    """Store the space in a new study; refuse an existing study with another space."""
    stored = study.user_attrs.get("search_space")
    if stored is None:
        if study.trials:
            raise ConfigError(f"study {study.study_name!r} exists and was not made by "
                              "`ambiqa tune` (it has trials but no ambiqa search space)",
                              hint="pick another --study name")
        study.set_user_attr("search_space", space)
        return
    if stored != json.loads(json.dumps(space)):
        diff = sorted(k for k in set(stored) | set(space) if stored.get(k) != json.loads(
            json.dumps(space.get(k))))
        raise ConfigError(
            f"study {study.study_name!r} exists with a different search space "
            f"(differs in: {', '.join(diff)})",
            hint="rerun with the original settings to resume it, or pick a new --study name")


# ---- demo pools ---------------------------------------------------------------------------------
def _demos_json(demos: list[Any]) -> list[dict[str, Any]]:
    holder = dspy.Predict("question -> answer")
    holder.demos = list(demos)
    return json.loads(json.dumps(holder.dump_state()["demos"], default=str))


def build_pools(program: dspy.Module, train_part: list[Any], metric: Any, cfg: TuneConfig,
                budget: Budget) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Per source ("labeled", "bootstrap") and predictor, the candidate demos (JSON)."""
    gold = labeled_demos(train_part)
    pools: dict[str, dict[str, list[dict[str, Any]]]] = {"labeled": {}, "bootstrap": {}}
    for name, predictor in program.named_predictors():
        pools["labeled"][name] = _demos_json(gold.get(predictor.signature.__name__, [])
                                             [: cfg.pool_size])
    if {"bootstrap", "knn", "signal"} & set(cfg.teleprompters):
        try:
            boot = bootstrap(program, train_part, metric, k=cfg.pool_size, seed=cfg.seed,
                             budget=budget, pools=gold, fill=False)
            for name, predictor in boot.named_predictors():
                pools["bootstrap"][name] = _demos_json(predictor.demos)
        except BudgetExhausted:
            pass
    if "signal" in cfg.teleprompters:
        pools["signal"] = signal_pools(program, train_part, metric, cfg, budget, gold)
    return pools


def signal_pools(program: dspy.Module, train_part: list[Any], metric: Any, cfg: TuneConfig,
                 budget: Budget, gold: dict[str, list[Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per signalled predictor, up to ``pool_size`` demos chosen against its own signal,
    balanced across its classes (in alternating order), from one traced pass of the
    gold-demo teacher over the train part; other predictors get no signal pool."""
    teacher = program.deepcopy()
    apply_labeled(teacher, gold, min(2, cfg.pool_size), cfg.seed)
    records = collect_traces(teacher, train_part, metric, budget)
    chosen = signal_demos(teacher, records, cfg.pool_size, seed=cfg.seed)
    return {name: _demos_json(predictor.demos) for name, predictor in teacher.named_predictors()
            if chosen.get(name, {}).get("demos")}


def signal_window(pool: list[dict[str, Any]], index: int, size: int) -> list[dict[str, Any]]:
    """Demo set ``index`` of a signal pool: ``size`` consecutive demos starting at
    ``index * 2`` (wrapping), so each set keeps the pool's alternation of classes."""
    if not pool or size <= 0:
        return []
    start = (index * 2) % len(pool)
    return [dict(pool[(start + i) % len(pool)]) for i in range(min(size, len(pool)))]


def candidate_set(pool: list[dict[str, Any]], seed: int, index: int, size: int,
                  predictor: str) -> list[dict[str, Any]]:
    """Demo set ``index`` of a predictor: a window of ``size`` over the pool shuffled by
    ``seed`` (windows wrap, so small pools still give distinct orderings)."""
    if not pool or size <= 0:
        return []
    order = list(range(len(pool)))
    random.Random(f"{seed}/{predictor}").shuffle(order)
    start = (index * size) % len(order)
    picked = [order[(start + i) % len(order)] for i in range(min(size, len(order)))]
    return [dict(pool[i]) for i in picked]


def materialize(params: dict[str, Any], cfg: TuneConfig, recipe: Recipe, pools: dict[str, Any],
                retriever: Any, knn_encoder: Any = None) -> tuple[dspy.Module, dict[str, Any]]:
    """The program a trial's parameters describe (no LM call), and its optimizer settings."""
    knobs = {k.name: params[f"program.{k.name}"] for k in recipe.knobs
             if f"program.{k.name}" in params}
    program = build_program(recipe.program, retriever=retriever,
                            **{**cfg.program_config, **knobs})
    tp = params.get("teleprompter", cfg.teleprompters[0])
    seed = params.get("seed", 0)
    demos: dict[str, int] = {}
    for name, predictor in program.named_predictors():
        n = params.get(f"demos.{name}", cfg.max_demos)
        index = params.get(f"demoset.{name}", 0)
        labeled = pools.get("labeled", {}).get(name, [])
        boot = pools.get("bootstrap", {}).get(name, [])
        signal = pools.get("signal", {}).get(name, [])
        if tp == "knn":
            predictor.demos = [dict(d) for d in (labeled + boot)[: cfg.pool_size]] if n else []
        elif tp == "signal" and signal:
            predictor.demos = signal_window(signal, index, n)
        elif tp == "signal":  # no signal of its own: the end metric's traces, else gold
            predictor.demos = candidate_set(boot or labeled, seed, index, n, name)
        else:
            pool = (labeled or boot) if tp == "labeled" else (boot or labeled)
            predictor.demos = candidate_set(pool, seed, index, n, name)
        demos[name] = n if tp == "knn" else len(predictor.demos)
    settings: dict[str, Any] = {"name": tp, "seed": seed, "demos": demos}
    if tp == "knn":
        install_knn(program, max(1, cfg.max_demos), encoder=knn_encoder)
        for name, predictor in program.named_predictors():
            predictor.knn_k = max(1, demos[name])
        settings["k"] = max(1, cfg.max_demos)
        settings["k_per_predictor"] = demos
    return program, settings


def zero_shot_params(cfg: TuneConfig, recipe: Recipe, program: dspy.Module,
                     predictors: list[str]) -> dict[str, Any]:
    """The trial that is the program as written: no demos anywhere, its own settings (each
    knob at the program's value, clamped into the knob's range). Enqueued first in every new
    study, so the best trial can only be another one if it beats zero-shot on the same
    held-out questions under the same objective (the do-no-harm rule of
    :mod:`ambiqa.optimizers.select`)."""
    params: dict[str, Any] = {"seed": 0}
    if len(cfg.teleprompters) > 1:
        params["teleprompter"] = cfg.teleprompters[0]
    for name in predictors:
        params[f"demos.{name}"] = 0
        params[f"demoset.{name}"] = 0
    if cfg.tune_knobs:
        config = program.config() if hasattr(program, "config") else {}
        for knob in recipe.knobs:
            value = config.get(knob.name)
            if knob.choices:
                params[f"program.{knob.name}"] = value if value in knob.choices \
                    else knob.choices[0]
            else:
                value = value if isinstance(value, int) else knob.low
                params[f"program.{knob.name}"] = min(knob.high, max(knob.low, value))
    return params


# ---- the study ----------------------------------------------------------------------------------
def tune(cfg: TuneConfig, trainset: list[Any], metric: Any, *, retriever: Any = None,
         out: str | Path | None = None, manifest_extra: dict[str, Any] | None = None,
         knn_encoder: Any = None, progress: Any = None) -> TuneResult:
    """Run (or resume) the study; write the best trial as an artifact at ``out``."""
    optuna = _optuna()
    recipe = get_recipe(cfg.program)
    cfg.train = cfg.train or recipe.train
    cfg.metric = cfg.metric or recipe.metric
    cfg.check(recipe)
    guard = check_training_data(trainset, spec=cfg.train, allow_eval_splits=cfg.allow_eval_splits,
                                what="tuning")
    examples = usable_examples(trainset, recipe, cfg.metric, cfg.train)
    train_part, val_part = split_train(examples, cfg.val_fraction, seed=cfg.seed)
    if cfg.n_val:
        val_part = val_part[: cfg.n_val]
    base = build_program(recipe.program, retriever=retriever, **cfg.program_config)
    predictors = [n for n, _ in base.named_predictors()]
    space = search_space(cfg, recipe, predictors)

    storage = make_storage(cfg.storage)
    study = optuna.create_study(study_name=cfg.study, storage=storage, direction="maximize",
                                load_if_exists=True)
    check_space(study, space)
    safe = SafeMetric(metric)
    budget = Budget(cfg.max_lm_calls)
    written: dict[str, Any] = {"path": None}

    def write_best(trial_number: int, params: dict[str, Any], value: float,
                   score: float | None) -> None:
        if out is None:
            return
        program, settings = materialize(params, cfg, recipe, pools, retriever, knn_encoder)
        manifest = Manifest(
            program=recipe.program, program_config=program.config(),
            lm=lm_id(dspy.settings.lm) if dspy.settings.lm is not None else None,
            retriever=describe(retriever), reader=getattr(metric, "reader_name", None),
            metric=cfg.metric, train=cfg.train, dev=None,
            scores={"train": score, "objective": value, "train_n": len(val_part),
                    "train_note": "held-out part of the training split"},
            optimizer={**settings, "tuned_by": "optuna"},
            optuna={"study": cfg.study, "storage": redact_url(cfg.storage),
                    "trial": trial_number, "value": value, "params": params},
            demos_per_predictor={n: len(p.demos) for n, p in program.named_predictors()},
            data_guard=guard).update(manifest_extra)
        if manifest.compile_cost is None:
            manifest.compile_cost = {"lm_calls_this_run": budget.spent}
        save_artifact(out, program, manifest)
        written["path"] = str(out)

    ran = 0
    with budget.watch():
        pools = study.user_attrs.get("pools")
        if pools is None:
            pools = build_pools(base, train_part, safe, cfg, budget)
            fresh = optuna.load_study(study_name=cfg.study, storage=storage)
            if fresh.user_attrs.get("pools") is None:  # another worker may have won the race
                study.set_user_attr("pools", pools)
            else:
                pools = fresh.user_attrs["pools"]

        def objective(trial: Any) -> float:
            if budget.exhausted:
                budget.stopped = True
                study.stop()
                trial.set_user_attr("stopped_by_budget", True)
                raise optuna.TrialPruned("LM-call budget spent")
            if len(cfg.teleprompters) > 1:
                trial.suggest_categorical("teleprompter", list(cfg.teleprompters))
            trial.suggest_int("seed", 0, cfg.n_seeds - 1)
            for name in predictors:
                trial.suggest_int(f"demos.{name}", 0, cfg.max_demos)
                trial.suggest_int(f"demoset.{name}", 0, cfg.n_sets - 1)
            if cfg.tune_knobs:
                for knob in recipe.knobs:
                    knob.suggest(trial)
            program, settings = materialize(trial.params, cfg, recipe, pools, retriever,
                                            knn_encoder)
            try:
                result = score_program(program, val_part, safe, budget)
            except BudgetExhausted:
                study.stop()
                trial.set_user_attr("stopped_by_budget", True)
                raise optuna.TrialPruned("LM-call budget spent") from None
            n = max(1, result["n"])
            cost = result["cost"]
            calls_q = cost["lm_calls"] / n
            ktok_q = (cost["input_tokens"] + cost["output_tokens"]) / n / 1000
            penalty = cfg.cost_penalty * (calls_q if cfg.cost_unit == "lm_calls" else ktok_q)
            value = result["score"] - penalty
            for key, v in (("score", result["score"]), ("lm_calls_per_q", calls_q),
                           ("ktokens_per_q", ktok_q), ("n_val", result["n"]),
                           ("errors", result["errors"]), ("nan_scores", result["nan_scores"]),
                           ("teleprompter", settings["name"])):
                trial.set_user_attr(key, v)
            return value

        def on_trial_end(study_: Any, trial: Any) -> None:
            nonlocal ran
            ran += 1
            if progress is not None:
                progress(trial)
            if _finished(study_, optuna) >= cfg.trials:  # other workers' trials count too
                study_.stop()
            if trial.state != optuna.trial.TrialState.COMPLETE:
                return
            try:
                best = study_.best_trial
            except ValueError:
                return
            if best.number == trial.number:
                write_best(trial.number, trial.params, trial.value,
                           trial.user_attrs.get("score"))

        if not study.trials:  # the first worker: zero-shot is always one of the candidates
            study.enqueue_trial(zero_shot_params(cfg, recipe, base, predictors),
                                user_attrs={"zero_shot": True})
        finished = _finished(study, optuna)
        todo = cfg.trials - finished
        if todo > 0 and not budget.exhausted:
            n_startup = max(2, min(10, cfg.trials // 3))
            study.sampler = optuna.samplers.TPESampler(seed=cfg.seed + len(study.trials),
                                                       n_startup_trials=n_startup)
            study.optimize(objective, n_trials=todo, callbacks=[on_trial_end],
                           catch=(AssertionError,))
        stopped = budget.stopped or budget.exhausted and _finished(study, optuna) < cfg.trials

    study = optuna.load_study(study_name=cfg.study, storage=storage)
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    best = max(complete, key=lambda t: t.value) if complete else None
    if best is not None:
        best = study.best_trial
        write_best(best.number, best.params, best.value, best.user_attrs.get("score"))
    return TuneResult(
        study=cfg.study, best_value=best.value if best else None,
        best_params=dict(best.params) if best else {},
        best_trial=best.number if best else None, n_complete=len(complete),
        n_pruned=sum(t.state == optuna.trial.TrialState.PRUNED for t in study.trials),
        n_running_stale=sum(t.state == optuna.trial.TrialState.RUNNING for t in study.trials),
        ran_trials=ran, lm_calls=budget.spent, stopped_by_budget=bool(stopped),
        artifact=written["path"], best_score=best.user_attrs.get("score") if best else None)


def _finished(study: Any, optuna: Any) -> int:
    """Trials that count towards ``--trials``: complete, or pruned for a reason other than
    the budget (a budget-pruned trial is redone when the run resumes with more budget)."""
    done = 0
    for t in study.get_trials(deepcopy=False):
        if t.state == optuna.trial.TrialState.COMPLETE or (
                t.state == optuna.trial.TrialState.PRUNED
                and not t.user_attrs.get("stopped_by_budget")):
            done += 1
    return done
