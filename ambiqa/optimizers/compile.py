"""Compile a program with a registered teleprompter against a metric, on a training split only.

The teleprompters (``optimizer=``: ``none``, ``labeled``, ``bootstrap``, ``bootstrap-rs``,
``knn``, ``mipro``, ``gepa``, ``simba``, and any class registered with
:func:`ambiqa.optimizers.registry.register_teleprompter`) live in
:mod:`ambiqa.optimizers.teleprompters`; this module runs one and then the steps every compile
shares.

``predictor_signal=True`` (any teleprompter): after it, the compiled program runs once over
the training questions and each predictor with a signal of its own
(:mod:`ambiqa.optimizers.signals`: Diva's verifier, typing and rewriting, ToC's
self-verification, VerDICt's read) gets ``k`` demos chosen against that signal, balanced
across its classes (a yes and a no for a verifier); the other predictors keep the demos the
end metric chose. The report records, per predictor, the classes shown and the accuracy
against the signal on those training runs.

A metric that returns NaN (an LM reader that failed, an empty reference) counts as 0.0 for
that example -- a failed score must not pass a bootstrap threshold or win a search -- and the
number of such scores is reported (``nan_scores``).

``budget`` (:class:`ambiqa.optimizers.budget.Budget`) stops bootstrapping and candidate
search cleanly once spent, keeping the best so far (``stopped_by_budget`` in the report);
MIPROv2 checks it only before it starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dspy

from ambiqa.checks import check_int
from ambiqa.errors import ConfigError
from ambiqa.optimizers.budget import Budget, BudgetExhausted
from ambiqa.optimizers.demo_plan import apply_plan, parse_plan
from ambiqa.optimizers.knn import KNNPredict
from ambiqa.optimizers.recipes import check_teleprompter, split_train
from ambiqa.optimizers.registry import CompileJob, get_teleprompter, teleprompter_names
from ambiqa.optimizers.select import INPUT, ZERO_SHOT, Candidate, choose
from ambiqa.optimizers.signals import accuracy_from_traces, collect_traces, signal_demos
from ambiqa.optimizers.splits import check_training_data
from ambiqa.optimizers.teleprompters import (  # re-exported: the demo steps callers use
    SafeMetric,
    apply_labeled,
    bootstrap,
    fill_missing_demos,
    score_program,
)
from ambiqa.tracing import track

__all__ = ["CompileReport", "SafeMetric", "apply_labeled", "bootstrap", "compile_program",
           "fill_missing_demos", "score_program"]


@dataclass
class CompileReport:
    optimizer: str
    settings: dict[str, Any]
    demos_per_predictor: dict[str, int] = field(default_factory=dict)
    cost: dict[str, Any] = field(default_factory=dict)
    val_score: float | None = None
    candidates: list[dict[str, Any]] = field(default_factory=list)
    stopped_by_budget: bool = False
    nan_scores: int = 0
    data_guard: dict[str, Any] = field(default_factory=dict)
    #: every candidate's answer per validation question (``Selection.answer_rows``)
    selection_answers: list[dict[str, Any]] = field(default_factory=list)


def compile_program(program: dspy.Module, trainset: list[Any], *, optimizer: str = "bootstrap",
                    metric: Any = None, k: int = 2, seed: int = 0,
                    valset: list[Any] | None = None, n_val: int | None = None,
                    budget: Budget | None = None, train_spec: str | None = None,
                    devset: list[Any] | None = None, dev_spec: str | None = None,
                    allow_eval_splits: bool = False, threads: int = 1,
                    predictor_signal: bool = False, demos: str | dict[str, Any] | None = None,
                    select: bool = False, select_val: int | None = None,
                    candidates: list[Any] | None = None, force: bool | str = False,
                    metric_name: str = "metric", say: Callable[[str], None] | None = None,
                    **options: Any) -> tuple[dspy.Module, CompileReport]:
    """Return ``(compiled program, report)``.

    ``trainset`` must come from a training split: examples loaded from a dev/test split
    (:func:`ambiqa.data.load_dataset` tags them), a ``train_spec`` naming one, or question
    ids shared with ``devset`` are refused unless ``allow_eval_splits`` (research only; the
    report's ``data_guard`` then records it for the manifest). ``valset`` (bootstrap-rs,
    mipro) defaults to a held-out third of the training set, at most ``n_val`` questions
    (each candidate is scored on all of them); a given ``valset`` is checked like the
    training set, since searching on it is training on it. ``threads``: training questions
    answered at once while bootstrapping (bootstrap, bootstrap-rs, knn) and validation
    questions while the choice scores its candidates, for an LM that serves several calls at
    once. ``predictor_signal``: pick signalled predictors' demos against
    their own signals afterwards (module docstring). ``reflection_lm`` (gepa: the reflecting
    LM; simba: the rule writer), ``gepa_rollouts``/``gepa_auto``, ``gepa_selector``,
    ``reflection_minibatch``,
    ``simba_steps``/``simba_bsize`` (with ``num_candidates``): see
    :mod:`ambiqa.optimizers.gepa`.

    ``options``: the teleprompter's own settings, passed to its class (``threshold``,
    ``max_rounds``, ``num_candidates``, ``knn_pool``, ``gepa_rollouts``, ...: each class's
    ``options`` lists the ones it reads, with their defaults); a name no registered
    teleprompter reads is refused, so a misspelt setting cannot pass silently.

    ``demos``: a per-predictor demo plan applied after the teleprompter
    (:mod:`ambiqa.optimizers.demo_plan`, e.g. ``"verify=signal:2,write=none"``).
    ``select``: carve a validation split (``select_val`` questions, default a third of the
    training data, at most 20) out of the training data first, then score the zero-shot
    program, the input program, the result and its ``candidates`` (demo plans applied on top
    of it; default for a long-answer program: the writer with no demos and with one gold demo)
    there and ship the best (by the set-level statistic for DR: a metric from
    :func:`ambiqa.evaluation.registry.dspy_metric` carries its parts), zero-shot unless
    something beats it or ``force`` (True: the result; a label: that candidate)
    (:mod:`ambiqa.optimizers.select`); ``say`` gets its progress lines."""
    check_teleprompter(optimizer)
    check_int("threads", threads, 1)
    if not trainset:
        raise ConfigError("the training set is empty")
    guard = check_training_data([*trainset, *(valset or [])], spec=train_spec, devset=devset,
                                dev_spec=dev_spec, allow_eval_splits=allow_eval_splits,
                                what=f"compiling ({optimizer})")
    _check_options(options)
    settings: dict[str, Any] = {"k": k, "seed": seed, "threshold": options.get("threshold"),
                                "max_rounds": options.get("max_rounds", 1)}
    report = CompileReport(optimizer=optimizer, settings=settings, data_guard=guard)
    budget = budget or Budget(None)
    safe = SafeMetric(metric) if metric is not None else None
    plan = parse_plan(demos, default_k=k)
    select_set: list[Any] = []
    if select:
        if safe is None:
            raise ConfigError("choosing between candidates needs a metric (e.g. --metric dr)",
                              hint="or pass --no-select")
        trainset, select_set = carve_validation(trainset, select_val, seed, report)
    zero_shot, given = without_demos(program), program.deepcopy()
    cls = get_teleprompter(optimizer)
    if cls.needs_metric and safe is None:
        raise ConfigError(f"{optimizer} needs a metric (e.g. --metric d-f1)")
    if cls.holds_out and valset is None:
        trainset, valset = split_train(trainset, seed=seed)
    if valset is not None and n_val:
        valset = valset[:n_val]
    teleprompter = cls(**options)
    job = CompileJob(trainset=trainset, metric=safe, report=report, budget=budget, k=k,
                     seed=seed, threads=threads, valset=valset)
    with budget.watch(), track() as trace:
        compiled = teleprompter.compile(program, job)
        if predictor_signal:
            compiled = compiled if compiled is not program else program.deepcopy()
            settings["predictor_signal"] = _apply_signal(compiled, trainset, safe, k=k,
                                                         seed=seed, budget=budget,
                                                         threads=threads)
        if plan:
            compiled = compiled if compiled is not program else program.deepcopy()
            settings["demo_plan"] = apply_plan(compiled, plan, trainset, metric=safe,
                                               seed=seed, budget=budget, threads=threads,
                                               say=say)
        if select_set:
            parts = tuple(SafeMetric(p) for p in getattr(metric, "parts", ()))
            if parts:  # the statistic is the metric's own, whatever label the caller gave
                metric_name = getattr(metric, "metric_name", metric_name)
            compiled = _choose(compiled, zero_shot, given, select_set, trainset, safe, report,
                               label=optimizer + ("+plan" if plan else ""),
                               variants=candidates, force=force, metric_name=metric_name,
                               seed=seed, k=k, budget=budget, say=say, threads=threads,
                               parts=parts)
    report.stopped_by_budget = budget.stopped
    report.nan_scores = safe.nan if safe is not None else 0
    report.demos_per_predictor = {n: len(p.demos) for n, p in compiled.named_predictors()}
    report.cost = trace.summary()
    return compiled, report


def _check_options(options: dict[str, Any]) -> None:
    """Refuse a setting that no registered teleprompter reads (a typo, or a setting of an
    optimizer that does not exist); one a different teleprompter reads passes (the CLI and
    the api hand every teleprompter's flags to every compile)."""
    if not options:
        return
    known: set[str] = set()
    for name in teleprompter_names():
        known.update(get_teleprompter(name).options)
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(f"no teleprompter reads the setting(s) {', '.join(unknown)}",
                          hint="settings they read: " + ", ".join(sorted(known)))


def carve_validation(trainset: list[Any], n: int | None, seed: int, report: CompileReport,
                      ) -> tuple[list[Any], list[Any]]:
    """(training part, validation part): a third of the training data, at most ``n`` (20 by
    default) questions, seeded. Under 3 training questions nothing can be held out: the
    choice is skipped and the report says so."""
    if len(trainset) < 3:
        report.settings["selection"] = {"skipped": f"{len(trainset)} training questions: too "
                                                   "few to hold any out"}
        return trainset, []
    rest, val = split_train(trainset, seed=seed + 1)
    cap = 20 if n is None else n
    check_int("select_val", cap, 1)
    return rest + val[cap:], val[:cap]


def without_demos(program: dspy.Module) -> dspy.Module:
    """The zero-shot program: the input with every predictor's demos removed."""
    zero = program.deepcopy()
    for _, predictor in zero.named_predictors():
        predictor.demos = []
    return zero


#: candidates tried on top of a compiled long-answer program when none are given: the writer
#: is where the stored compiles lost (its answers copy its demos' length), and clarify with it
#: (compile-v3's clarify and writer demos undid what its signal demos gained upstream; the
#: third keeps the compiled upstream demos and runs clarify and the writer zero-shot, the
#: compile-v4 candidate). A program without a clarify predictor skips the third, recorded in
#: the selection as skipped; one whose only demos are clarify's and the writer's costs no LM
#: call for it (every call is the zero-shot candidate's, answered from the memo).
DEFAULT_VARIANTS = ({"writer": "none"}, {"writer": "gold:1"},
                    {"clarify": "none", "writer": "none"})


def _choose(compiled: dspy.Module, zero_shot: dspy.Module, given: dspy.Module,
            valset: list[Any], trainset: list[Any], metric: SafeMetric | None,
            report: CompileReport, *, label: str, variants: list[Any] | None, force: bool | str,
            metric_name: str, seed: int, k: int, budget: Budget,
            say: Callable[[str], None] | None = None, threads: int = 1,
            parts: tuple[Any, ...] = ()) -> dspy.Module:
    """Score the candidates on ``valset`` and return the one to ship (see
    :mod:`ambiqa.optimizers.select`); the selection goes into ``report.settings``.
    ``parts``: a set-level objective's per-question metrics (DR's D-F1 and ROUGE-L)."""
    cands = [Candidate(ZERO_SHOT, zero_shot), Candidate(INPUT, given),
             Candidate(label, compiled)]
    names = {p.signature.__name__ for _, p in compiled.named_predictors()}
    tried = variants if variants is not None else (
        list(DEFAULT_VARIANTS) if "WriteLongAnswer" in names else [])
    skipped = []
    for variant in tried:
        plan = parse_plan(variant, default_k=k)
        program = compiled.deepcopy()
        text = ",".join(f"{key}={src}" for key, src in plan.items())
        try:
            apply_plan(program, plan, trainset, metric=metric, seed=seed, budget=budget,
                       threads=threads, say=say)
        except ConfigError as exc:
            skipped.append({"candidate": text, "why": exc.message})
            continue
        cands.append(Candidate(f"{label}+{text}", program, note=text))
    try:
        shipped, selection = choose(cands, valset, metric, metric_name=metric_name,
                                    preferred=label, force=force, budget=budget, say=say,
                                    threads=threads, parts=parts)
    except BudgetExhausted:
        report.settings["selection"] = {"skipped": "the LM-call budget ran out before every "
                                                   "candidate was scored: not checked"}
        return compiled
    report.selection_answers = selection.answer_rows()
    report.settings["selection"] = {**selection.to_dict(),
                                    **({"variants_skipped": skipped} if skipped else {})}
    report.val_score = next(r["mean"] for r in selection.rows
                            if r["label"] == selection.shipped)
    return shipped


def _apply_signal(compiled: dspy.Module, trainset: list[Any], metric: SafeMetric | None, *,
                  k: int, seed: int, budget: Budget, threads: int = 1) -> dict[str, Any]:
    """One traced pass over the training questions, then demos against each predictor's own
    signal (:func:`ambiqa.optimizers.signals.signal_demos`); a knn program's signalled
    predictors show all of their k signal demos."""
    records = collect_traces(compiled, trainset, metric, budget, threads=threads)
    chosen = signal_demos(compiled, records, k, seed=seed)
    for name, predictor in compiled.named_predictors():
        if name in chosen and isinstance(predictor, KNNPredict):
            predictor.knn_k = max(predictor.knn_k, len(predictor.demos))
    return {"runs": len(records), "demos": chosen,
            "train_accuracy_before": accuracy_from_traces(records)}


