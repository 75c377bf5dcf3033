"""The built-in teleprompters, each a registered class, and the demo steps they share.

Teleprompters (``optimizer=``):

* ``none`` -- the program as written (zero-shot), for a baseline artifact;
* ``labeled`` -- DSPy's LabeledFewShot idea, per predictor: each predictor whose signature
  can be labeled from gold training data (see :mod:`ambiqa.optimizers.demos`) gets ``k``
  demos sampled with a fixed seed. No LM call.
* ``bootstrap`` -- ``dspy.BootstrapFewShot``: run the program (with labeled demos as the
  teacher, where available) on training questions and keep the traces whose metric passes the
  threshold as demos for every predictor, including those no gold data labels (Diva's typing
  and verification, ToC's self-verification, ...). A predictor for which no trace passes keeps
  the teacher's gold demos: with small models, labeled demos carry the output format.
* ``bootstrap-rs`` -- the candidate search of ``dspy.BootstrapFewShotWithRandomSearch``
  (zero-shot, labeled, then ``num_candidates`` bootstrapped demo sets, each from a differently
  shuffled train part with a random number of demos in 1..k), every candidate scored on a
  held-out part of the training split; the best one wins. It is written out here rather than
  calling DSPy's class so that every candidate gets the gold fill-in above and the LM-call
  budget is checked between candidates.
* ``knn`` -- nearest-neighbour demos per question (DSPy's KNNFewShot idea, the way Diva and
  ToC pick few-shot examples): each predictor's pool is its gold demos plus bootstrapped
  traces; at call time it shows the ``k`` nearest (:mod:`ambiqa.optimizers.knn`, local
  MiniLM). ``knn_gold_only`` keeps only the gold demos (no bootstrap, no LM call): ToC's own
  set-up, which picks its exemplars among labelled training questions by similarity, with
  ``knn_pool`` large enough that the neighbours come from the whole split.
* ``mipro`` -- ``dspy.MIPROv2`` (instructions + demos) with small explicit settings:
  ``num_candidates`` instruction/demo candidates, ``mipro_trials`` Bayesian-search trials,
  no minibatching, and the program/data-aware proposers off (they cost many LM calls and
  read source code and data summaries a small local model handles poorly).

* ``gepa`` -- ``dspy.GEPA``: instructions evolved by reflecting on runs with feedback written
  for ambiguous QA (:mod:`ambiqa.optimizers.feedback`: per gold interpretation, stated or not,
  and which step lost it), candidates tracked on a held-out part of the training split;
  ``reflection_lm`` (any ``dspy.LM`` or spec; default the task LM). See
  :mod:`ambiqa.optimizers.gepa`.
* ``simba`` -- ``dspy.SIMBA``: mini-batch ascent adding self-written rules and demos.

Each class registers itself (:mod:`ambiqa.optimizers.registry`); :func:`compile_program`
(:mod:`ambiqa.optimizers.compile`) runs one and then the steps every compile shares
(per-predictor demo plans, the choice on the validation split).
"""

from __future__ import annotations

import math
import random
from typing import Any

import dspy

from ambiqa.errors import AmbiqaError, ArtifactError, ConfigError, ModelError
from ambiqa.lm import make_lm
from ambiqa.optimizers.ahead import AheadBootstrapFewShot
from ambiqa.optimizers.budget import Budget, BudgetExhausted
from ambiqa.optimizers.demos import labeled_demos, pick_gold
from ambiqa.optimizers.gepa import run_gepa, run_simba
from ambiqa.optimizers.knn import install_knn
from ambiqa.optimizers.recipes import split_train
from ambiqa.optimizers.registry import (
    BUILTIN,
    CompileJob,
    Teleprompter,
    register_teleprompter,
)
from ambiqa.tracing import record_event, track


class SafeMetric:
    """Wrap a metric so NaN (or an exception inside it) scores 0.0, and count those."""

    def __init__(self, metric: Any) -> None:
        self.metric = metric
        self.nan = 0
        self.errors = 0

    def __call__(self, example: Any, pred: Any, trace: Any = None) -> float:
        try:
            score = float(self.metric(example, pred, trace))
        except (TypeError, ValueError) as exc:
            self.errors += 1
            record_event("metric", f"metric failed, scored 0: {type(exc).__name__}: {exc}")
            return 0.0
        if math.isnan(score):
            self.nan += 1
            record_event("metric", "metric returned NaN, scored 0")
            return 0.0
        return score


def score_program(program: Any, examples: list[Any], metric: Any,
                  budget: Budget | None = None) -> dict[str, Any]:
    """Mean metric of ``program`` over ``examples``, one at a time, with cost.

    A failing program call scores 0 (counted in ``errors``). With a ``budget``, the check
    runs before each example and raises :class:`BudgetExhausted` when spent.
    """
    safe = metric if isinstance(metric, SafeMetric) else SafeMetric(metric)
    scores: list[float] = []
    errors = 0
    with track() as trace:
        for ex in examples:
            if budget is not None:
                budget.check()
            try:
                pred = program(question=ex.question)
            except Exception as exc:  # one failing question must not end a search
                errors += 1
                record_event("score", f"program failed: {type(exc).__name__}: {exc}"[:200])
                scores.append(0.0)
                continue
            scores.append(safe(ex, pred))
    mean = sum(scores) / len(scores) if scores else 0.0
    return {"score": mean, "scores": scores, "n": len(scores), "errors": errors,
            "nan_scores": safe.nan, "cost": trace.summary()}


def apply_labeled(program: dspy.Module, pools: dict[str, list[Any]], k: int,
                  seed: int) -> dict[str, int]:
    """Give each labelable predictor ``k`` gold demos from ``pools`` (signature name → demos,
    see :func:`labeled_demos`); return demo counts per predictor."""
    rng = random.Random(seed)
    counts = {}
    for name, predictor in program.named_predictors():
        sig = predictor.signature.__name__
        pool = pools.get(sig, [])
        predictor.demos = pick_gold(pool, k, rng, sig) if pool else []
        counts[name] = len(predictor.demos)
    return counts


def _signature_names(program: dspy.Module) -> dict[str, str]:
    return {n: p.signature.__name__ for n, p in program.named_predictors()}


def _restore_signature_names(program: dspy.Module, names: dict[str, str]) -> None:
    """Optimizers that rewrite instructions rebuild signatures as anonymous classes; traces
    and exports name predictors by signature, so put the names back."""
    for name, predictor in program.named_predictors():
        if name in names:
            predictor.signature.__name__ = names[name]


def fill_missing_demos(compiled: dspy.Module, teacher: dspy.Module) -> None:
    """A predictor no trace passed for keeps the teacher's gold demos rather than none."""
    teacher_demos = {n: p.demos for n, p in teacher.named_predictors()}
    for name, predictor in compiled.named_predictors():
        if not predictor.demos and teacher_demos.get(name):
            predictor.demos = list(teacher_demos[name])


def bootstrap(program: dspy.Module, trainset: list[Any], metric: Any, *, k: int, seed: int,
              threshold: float | None = None, max_rounds: int = 1,
              budget: Budget | None = None, pools: dict[str, list[Any]] | None = None,
              fill: bool = True, teacher_k: int | None = None,
              threads: int = 1) -> dspy.Module:
    """BootstrapFewShot with a gold-demo teacher, shuffled by ``seed``, budget-aware.

    ``k`` traces are kept per predictor; the teacher that makes them shows ``teacher_k``
    gold demos per call (default ``k``). knn collects a larger pool than it shows, and a
    teacher showing the whole pool would not fit a small model's context. ``threads`` > 1
    answers that many training questions at once; the loop stays DSPy's, and the teacher never
    shows a question its own gold demo (:mod:`ambiqa.optimizers.ahead`).
    """
    if metric is None:
        raise ConfigError("bootstrapping needs a metric (e.g. --metric d-f1)")
    pools = labeled_demos(trainset) if pools is None else pools
    teacher = program.deepcopy()
    apply_labeled(teacher, pools, k if teacher_k is None else teacher_k, seed)

    def passes(example, pred, trace=None):
        score = metric(example, pred, trace)
        return score >= threshold if threshold is not None else score > 0

    tp = AheadBootstrapFewShot(metric=passes, max_bootstrapped_demos=k, max_labeled_demos=0,
                               max_rounds=max_rounds, threads=threads)
    shuffled = list(trainset)
    random.Random(seed).shuffle(shuffled)
    if budget is not None:
        shuffled = budget.iterate(shuffled)
    names = _signature_names(program)
    try:
        compiled = tp.compile(program.deepcopy(), teacher=teacher, trainset=shuffled)
    except (AmbiqaError, BudgetExhausted):
        raise
    except Exception as exc:  # DSPy re-raises once too many training examples failed
        raise _bootstrap_error(exc, k) from exc
    _restore_signature_names(compiled, names)
    if fill:
        fill_missing_demos(compiled, teacher)
    return compiled


def _bootstrap_error(exc: Exception, k: int) -> ModelError:
    """What to tell a user whose bootstrap stopped on repeated LM errors."""
    text = str(exc)
    if "context" in text.lower():
        hint = (f"the prompts with {k} demo(s) per call do not fit the LM's context: lower "
                "--k (and --knn-pool), or use a model with a longer context")
    else:
        hint = ("check the LM with `ambiqa doctor` or `ambiqa ask`, then rerun; --max-lm-calls "
                "bounds a compile")
    return ModelError(f"bootstrapping stopped: the LM failed on too many training examples "
                      f"(last error: {text[:300]})", hint=hint)


def _random_search(program: dspy.Module, trainset: list[Any], valset: list[Any] | None,
                   metric: SafeMetric | None, report: Any, *, k: int, seed: int,
                   threshold: float | None, max_rounds: int, num_candidates: int,
                   budget: Budget, threads: int = 1) -> dspy.Module:
    if metric is None:
        raise ConfigError("bootstrap-rs needs a metric (e.g. --metric d-f1)")
    if valset is None:
        trainset, valset = split_train(trainset, seed=seed)
    report.settings.update(num_candidates=num_candidates, n_train=len(trainset),
                           n_val=len(valset))
    pools = labeled_demos(trainset)
    best, best_score = None, -math.inf
    plan: list[tuple[str, int, int]] = [("zero-shot", -1, 0), ("labeled", seed, k)]
    rng = random.Random(seed)
    plan += [("bootstrap", seed + i, rng.randint(1, max(1, k))) for i in range(num_candidates)]
    for kind, cand_seed, size in plan:
        try:
            budget.check()
            if kind == "zero-shot":
                cand = program.deepcopy()
            elif kind == "labeled":
                cand = program.deepcopy()
                apply_labeled(cand, pools, size, cand_seed)
            else:
                cand = bootstrap(program, trainset, metric, k=size, seed=cand_seed,
                                 threshold=threshold, max_rounds=max_rounds, budget=budget,
                                 pools=pools, threads=threads)
                budget.check()
            result = score_program(cand, valset, metric, budget)
        except BudgetExhausted:
            break
        report.candidates.append({"kind": kind, "seed": cand_seed, "k": size,
                                  "score": round(result["score"], 6),
                                  "lm_calls": result["cost"]["lm_calls"]})
        if result["score"] > best_score:
            best, best_score = cand, result["score"]
    if best is None:  # the budget ran out before any candidate was scored
        best = program.deepcopy()
        apply_labeled(best, pools, k, seed)
        report.settings["fallback"] = "labeled (budget spent before any candidate was scored)"
    else:
        report.val_score = best_score
    return best


def _resolve_lm(lm: Any) -> Any:
    """A ``dspy.LM`` from an LM or a spec (``embedded``, ``provider/model``); None stays None
    (the optimizer then uses the task LM)."""
    if lm is None or not isinstance(lm, str):
        return lm
    return make_lm(lm)


def _reflective(optimizer: str, program: dspy.Module, trainset: list[Any],
                valset: list[Any] | None, metric: SafeMetric | None, report: Any, *,
                budget: Budget, seed: int, threads: int, reflection_lm: Any,
                rollouts: int | None, auto: str | None, minibatch: int, steps: int,
                bsize: int, k: int, num_candidates: int,
                selector: str = "round_robin") -> dspy.Module:
    """GEPA or SIMBA (:mod:`ambiqa.optimizers.gepa`), signature names restored after."""
    if metric is None:
        raise ConfigError(f"{optimizer} needs a metric (e.g. --metric d-f1)")
    names = _signature_names(program)
    lm = _resolve_lm(reflection_lm)
    try:
        if optimizer == "gepa":
            compiled, extra = run_gepa(program, trainset, valset or trainset, metric,
                                       reflection_lm=lm, budget=budget, rollouts=rollouts,
                                       auto=auto, minibatch=minibatch, seed=seed,
                                       threads=threads, selector=selector)
        else:
            compiled, extra = run_simba(program, trainset, metric, budget=budget, bsize=bsize,
                                        num_candidates=num_candidates, max_steps=steps,
                                        max_demos=k, prompt_lm=lm, seed=seed, threads=threads)
    except BudgetExhausted:
        report.settings["fallback"] = "zero-shot (budget spent before the search started)"
        return program.deepcopy()
    _restore_signature_names(compiled, names)
    report.settings.update(extra)
    if optimizer == "gepa" and extra.get("best_val_score") is not None:
        report.val_score = extra["best_val_score"]
    return compiled


def _mipro(program: dspy.Module, trainset: list[Any], valset: list[Any] | None,
           metric: SafeMetric | None, report: Any, *, k: int, seed: int,
           num_candidates: int, trials: int, budget: Budget) -> dspy.Module:
    if metric is None:
        raise ConfigError("mipro needs a metric (e.g. --metric d-f1)")
    budget.check()
    if valset is None:
        trainset, valset = split_train(trainset, seed=seed)
    settings = {"num_candidates": num_candidates, "num_trials": trials, "minibatch": False,
                "program_aware_proposer": False, "data_aware_proposer": False,
                "max_bootstrapped_demos": k, "max_labeled_demos": 0,
                "n_train": len(trainset), "n_val": len(valset)}
    report.settings.update(settings)
    names = _signature_names(program)
    teacher = program.deepcopy()
    apply_labeled(teacher, labeled_demos(trainset), k, seed)
    tp = dspy.MIPROv2(metric=metric, auto=None, num_candidates=num_candidates,
                      max_bootstrapped_demos=k, max_labeled_demos=0, num_threads=1, seed=seed,
                      init_temperature=0.5, verbose=False, track_stats=False)
    compiled = tp.compile(program.deepcopy(), trainset=trainset, valset=valset, teacher=teacher,
                          num_trials=trials, minibatch=False, program_aware_proposer=False,
                          data_aware_proposer=False, requires_permission_to_run=False)
    _restore_signature_names(compiled, names)
    fill_missing_demos(compiled, teacher)
    score = getattr(compiled, "score", None)
    report.val_score = float(score) if isinstance(score, int | float) else None
    return compiled


# ---- the registered teleprompters -----------------------------------------------------------
def _need_metric(name: str, metric: Any) -> None:
    if metric is None:
        raise ConfigError(f"{name} needs a metric (e.g. --metric d-f1)")


_BOOT = {"threshold": None, "max_rounds": 1}


@register_teleprompter
class ZeroShot(Teleprompter):
    name = "none"
    summary = BUILTIN["none"][1]

    def compile(self, student: Any, job: CompileJob) -> Any:
        return student


@register_teleprompter
class Labeled(Teleprompter):
    name = "labeled"
    summary = BUILTIN["labeled"][1]

    def compile(self, student: Any, job: CompileJob) -> Any:
        compiled = student.deepcopy()
        pools = labeled_demos(job.trainset)
        if not pools:
            raise ConfigError("no training example yields labeled demos",
                              hint="ASQA-style data with qa_pairs, gold passages and long "
                                   "answers is needed; use bootstrap for other data")
        apply_labeled(compiled, pools, job.k, job.seed)
        return compiled


@register_teleprompter
class Bootstrap(Teleprompter):
    name = "bootstrap"
    summary = BUILTIN["bootstrap"][1]
    options = dict(_BOOT)

    def compile(self, student: Any, job: CompileJob) -> Any:
        return bootstrap(student, job.trainset, job.metric, k=job.k, seed=job.seed,
                         budget=job.budget, threads=job.threads, **self.settings)

    @classmethod
    def program_calls(cls, n_train: int, n_val: int, num_candidates: int, trials: int,
                      ) -> tuple[float, float]:
        return 0.0, float(n_train)


@register_teleprompter
class BootstrapRS(Teleprompter):
    name = "bootstrap-rs"
    summary = BUILTIN["bootstrap-rs"][1]
    holds_out = True
    needs_metric = True
    options = {**_BOOT, "num_candidates": 4}

    def compile(self, student: Any, job: CompileJob) -> Any:
        s = self.settings
        return _random_search(student, job.trainset, job.valset, job.metric, job.report,
                              k=job.k, seed=job.seed, threshold=s["threshold"],
                              max_rounds=s["max_rounds"], num_candidates=s["num_candidates"],
                              budget=job.budget, threads=job.threads)

    @classmethod
    def program_calls(cls, n_train: int, n_val: int, num_candidates: int, trials: int,
                      ) -> tuple[float, float]:
        return float(n_val), float(n_val + num_candidates * (n_train + n_val))


@register_teleprompter
class KNN(Teleprompter):
    name = "knn"
    summary = BUILTIN["knn"][1]
    options = {**_BOOT, "knn_encoder": None, "knn_pool": 8, "knn_gold_only": False}

    def compile(self, student: Any, job: CompileJob) -> Any:
        s = self.settings
        pool_size, gold_only = s["knn_pool"], s["knn_gold_only"]
        job.report.settings.update(pool=pool_size, gold_only=gold_only)
        pools = labeled_demos(job.trainset)
        if job.metric is not None and not gold_only:
            compiled = bootstrap(student, job.trainset, job.metric, k=pool_size, seed=job.seed,
                                 threshold=s["threshold"], max_rounds=s["max_rounds"],
                                 budget=job.budget, pools=pools, fill=False, teacher_k=job.k,
                                 threads=job.threads)
        else:
            compiled = student.deepcopy()
            for _, p in compiled.named_predictors():
                p.demos = []
        # pool = gold demos of the predictor's signature + its bootstrapped traces
        for _, predictor in compiled.named_predictors():
            gold = pools.get(predictor.signature.__name__, [])[:pool_size]
            predictor.demos = list(gold) + list(predictor.demos)
        if not any(p.demos for _, p in compiled.named_predictors()):
            raise ConfigError("knn found no demos to choose from",
                              hint="give a metric so traces can be bootstrapped, or use "
                                   "ASQA-style data that yields gold demos")
        install_knn(compiled, job.k, encoder=s["knn_encoder"])
        return compiled

    @classmethod
    def program_calls(cls, n_train: int, n_val: int, num_candidates: int, trials: int,
                      ) -> tuple[float, float]:
        return 0.0, float(n_train)

    @classmethod
    def install(cls, program: Any, settings: dict[str, Any], *, encoder: Any = None) -> None:
        k = settings.get("k")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ArtifactError(f"knn artifact has no valid k in its optimizer settings: {k!r}")
        install_knn(program, k, encoder=encoder)


@register_teleprompter
class MIPRO(Teleprompter):
    name = "mipro"
    summary = BUILTIN["mipro"][1]
    holds_out = True
    needs_metric = True
    options = {"num_candidates": 4, "mipro_trials": 4}

    def compile(self, student: Any, job: CompileJob) -> Any:
        return _mipro(student, job.trainset, job.valset, job.metric, job.report, k=job.k,
                      seed=job.seed, num_candidates=self.settings["num_candidates"],
                      trials=self.settings["mipro_trials"], budget=job.budget)

    @classmethod
    def program_calls(cls, n_train: int, n_val: int, num_candidates: int, trials: int,
                      ) -> tuple[float, float]:
        return 0.0, float(num_candidates * n_train + (trials + 1) * n_val)

    @classmethod
    def proposer_calls(cls, plain: float, n_predictors: int, num_candidates: int) -> float:
        return 2.0 * n_predictors * num_candidates


_REFLECT = {"num_candidates": 4, "reflection_lm": None, "gepa_rollouts": None,
            "gepa_auto": None, "reflection_minibatch": 2, "simba_steps": 2, "simba_bsize": 4,
            "gepa_selector": "round_robin"}


class _Reflective(Teleprompter):
    needs_metric = True
    options = _REFLECT

    def compile(self, student: Any, job: CompileJob) -> Any:
        s = self.settings
        return _reflective(self.name, student, job.trainset, job.valset, job.metric,
                           job.report, budget=job.budget, seed=job.seed, threads=job.threads,
                           reflection_lm=s["reflection_lm"], rollouts=s["gepa_rollouts"],
                           auto=s["gepa_auto"], minibatch=s["reflection_minibatch"],
                           steps=s["simba_steps"], bsize=s["simba_bsize"], k=job.k,
                           num_candidates=s["num_candidates"], selector=s["gepa_selector"])


@register_teleprompter
class GEPA(_Reflective):
    name = "gepa"
    summary = BUILTIN["gepa"][1]
    holds_out = True

    @classmethod
    def program_calls(cls, n_train: int, n_val: int, num_candidates: int, trials: int,
                      ) -> tuple[float, float]:
        return float(3 * (n_train + n_val)), 0.0  # default rollouts: three passes

    @classmethod
    def proposer_calls(cls, plain: float, n_predictors: int, num_candidates: int) -> float:
        return plain / 4.0  # one reflection per iteration of ~2 mini-batch runs x 2


@register_teleprompter
class SIMBA(_Reflective):
    name = "simba"
    summary = BUILTIN["simba"][1]

    @classmethod
    def program_calls(cls, n_train: int, n_val: int, num_candidates: int, trials: int,
                      ) -> tuple[float, float]:
        bsize = max(1, min(4, n_train))  # defaults: 2 steps, mini-batch 4
        per_step = num_candidates * bsize + (num_candidates + 1) * bsize
        return 0.0, float(2 * per_step + (num_candidates + 1) * n_train)

    @classmethod
    def proposer_calls(cls, plain: float, n_predictors: int, num_candidates: int) -> float:
        return 2.0 * (num_candidates + 1)  # at most one rule per candidate per step
