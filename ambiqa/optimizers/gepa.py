"""GEPA and SIMBA (DSPy 3.4) for ambiqa's programs, budget-aware and artifact-ready.

* ``gepa`` -- ``dspy.GEPA``: evolves each predictor's *instructions* by reflecting on runs
  with the textual feedback of :class:`ambiqa.optimizers.feedback.AmbiguityFeedback` (which
  gold reading the answer missed and which step lost it). Candidates are tracked on a
  held-out part of the training split (never dev). The reflection LM is any ``dspy.LM``
  (``--reflection-lm``); by default the task LM itself, i.e. the embedded model reflects on
  its own runs. Its proposals are made with ``ChatAdapter`` (the format ambiqa's small models
  follow; GEPA's default JSON adapter fails on them) and see each field shortened to
  ``max_field_chars`` characters, so a reflection prompt over Diva's passages still fits a
  4k context. Merging is off: it needs several lineages, which small budgets never grow.
* ``simba`` -- ``dspy.SIMBA``: mini-batch ascent that appends self-written rules to
  instructions or successful traces as demos. The mini-batch is at most the training set.

Budgets: ``rollouts`` (GEPA's ``max_metric_calls``: program runs it may score) bounds GEPA
itself; ``--max-lm-calls`` (:class:`~ambiqa.optimizers.budget.Budget`) is checked before
every predictor call (:class:`budget_guard`) and, for GEPA, by a stop callback between
iterations. Once spent, a program run fails at its next LM step and scores 0, a proposal or
rule fails and changes nothing, and the optimizer winds down without another LM call; the
overshoot is the calls in flight (at most one per thread). Candidates scored after that point
score 0, so they never win; a SIMBA run stopped before its final validation returns the best
program by the scores it had (often the unchanged student). ``stopped_by_budget`` in the
report says when it happened.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import dspy

from ambiqa.errors import ConfigError
from ambiqa.lm import lm_id
from ambiqa.optimizers.budget import Budget
from ambiqa.optimizers.feedback import AmbiguityFeedback

log = logging.getLogger(__name__)

GEPA_AUTO = ("light", "medium", "heavy")
GEPA_SELECTORS = ("round_robin", "all")
#: characters kept of each input/output field shown to the reflection LM
MAX_FIELD_CHARS = 600


def _shorten(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + " [...]"
    if isinstance(value, Mapping):
        return {k: _shorten(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_shorten(v, limit) for v in value]
    return value


class CompactProposer:
    """GEPA's instruction proposer with every reflective field cut to ``limit`` characters
    and ChatAdapter formatting (see the module docstring)."""

    def __init__(self, limit: int = MAX_FIELD_CHARS, max_chars: int | None = 2000) -> None:
        from dspy.teleprompt.gepa.instruction_proposal import InstructionProposer

        self.limit = limit
        self.inner = InstructionProposer(max_chars=max_chars, adapter=dspy.ChatAdapter())

    def __call__(self, candidate: dict[str, str],
                 reflective_dataset: Mapping[str, Sequence[Mapping[str, Any]]],
                 components_to_update: list[str]) -> dict[str, str]:
        short = {name: [_shorten(dict(ex), self.limit) for ex in examples]
                 for name, examples in reflective_dataset.items()}
        return self.inner(candidate=candidate, reflective_dataset=short,
                          components_to_update=components_to_update)


class _BudgetStop:
    """GEPA stop callback: stop once the LM-call budget is spent."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget

    def __call__(self, gepa_state: Any) -> bool:
        if self.budget.exhausted:
            self.budget.stopped = True
            return True
        return False


def run_gepa(program: dspy.Module, trainset: list[Any], valset: list[Any], metric: Any, *,
             reflection_lm: Any = None, budget: Budget | None = None,
             rollouts: int | None = None, auto: str | None = None,
             minibatch: int = 2, seed: int = 0, threads: int = 1,
             max_field_chars: int = MAX_FIELD_CHARS, selector: str = "round_robin",
             ) -> tuple[dspy.Module, dict[str, Any]]:
    """Compile ``program`` with ``dspy.GEPA``; return (program, settings for the report).

    ``metric`` is the end metric (a SafeMetric or a DSPy metric); it is wrapped in
    :class:`AmbiguityFeedback`. ``rollouts`` (default: three passes over train + held-out)
    and ``auto`` are GEPA's budget knobs; give at most one. ``selector``: which predictors an
    iteration rewrites, ``round_robin`` (one at a time, DSPy's default) or ``all``.
    """
    if metric is None:
        raise ConfigError("gepa needs a metric (e.g. --metric d-f1)")
    if auto is not None and auto not in GEPA_AUTO:
        raise ConfigError(f"unknown --gepa-auto {auto!r}", hint=f"choose {', '.join(GEPA_AUTO)}")
    if auto is not None and rollouts is not None:
        raise ConfigError("give either --gepa-auto or --gepa-rollouts, not both")
    if selector not in GEPA_SELECTORS:
        raise ConfigError(f"unknown --gepa-selector {selector!r}",
                          hint=f"choose {', '.join(GEPA_SELECTORS)}")
    if minibatch < 1:
        raise ConfigError(f"--reflection-minibatch must be >= 1, got {minibatch}")
    budget = budget or Budget(None)
    if rollouts is None and auto is None:
        rollouts = 3 * (len(trainset) + len(valset))
    feedback = AmbiguityFeedback(metric)
    tp = dspy.GEPA(metric=feedback, auto=auto, max_metric_calls=rollouts,
                   reflection_minibatch_size=minibatch, reflection_lm=reflection_lm,
                   instruction_proposer=CompactProposer(max_field_chars),
                   candidate_selection_strategy="pareto", use_merge=False,
                   component_selector=selector,
                   num_threads=threads, seed=seed, track_stats=True,
                   warn_on_score_mismatch=False,
                   gepa_kwargs={"stop_callbacks": [_BudgetStop(budget)]})
    budget.check()
    with budget_guard(budget):
        compiled = tp.compile(program.deepcopy(), trainset=trainset, valset=valset)
    settings: dict[str, Any] = {
        "rollouts": tp.max_metric_calls, "auto": auto, "reflection_minibatch": minibatch,
        "reflection_lm": _lm_name(reflection_lm), "selector": selector,
        "n_train": len(trainset),
        "n_val": len(valset), "max_field_chars": max_field_chars}
    details = getattr(compiled, "detailed_results", None)
    if details is not None:
        scores = list(details.val_aggregate_scores)
        settings.update(candidates=len(scores), seed_val_score=round(scores[0], 6),
                        best_val_score=round(max(scores), 6),
                        rollouts_used=details.total_metric_calls)
        try:
            del compiled.detailed_results  # not state; keeps deep copies and dumps small
        except AttributeError:
            pass
    return compiled, settings


def _lm_name(lm: Any) -> str | None:
    if lm is None:
        return None
    return lm_id(lm)


def run_simba(program: dspy.Module, trainset: list[Any], metric: Any, *,
              budget: Budget | None = None, bsize: int = 4, num_candidates: int = 2,
              max_steps: int = 2, max_demos: int = 2, prompt_lm: Any = None, seed: int = 0,
              threads: int = 1) -> tuple[dspy.Module, dict[str, Any]]:
    """Compile ``program`` with ``dspy.SIMBA`` under the budget; return (program, settings).

    The budget guard wraps each predictor call of the runs SIMBA makes: once spent, a run
    raises :class:`~ambiqa.optimizers.budget.BudgetExhausted` at its first LM step, which
    SIMBA scores as a failed run (0) without an LM call.
    """
    if metric is None:
        raise ConfigError("simba needs a metric (e.g. --metric d-f1)")
    budget = budget or Budget(None)
    bsize = max(1, min(bsize, len(trainset)))
    if num_candidates < 1 or max_steps < 1 or max_demos < 0:
        raise ConfigError("simba needs num_candidates >= 1, max_steps >= 1 and max_demos >= 0")

    def guarded_metric(example: Any, pred: Any, trace: Any = None) -> float:
        return float(metric(example, pred)) if pred is not None else 0.0

    budget.check()
    student = program.deepcopy()
    tp = dspy.SIMBA(metric=guarded_metric, bsize=bsize, num_candidates=num_candidates,
                    max_steps=max_steps, max_demos=max_demos, prompt_model=prompt_lm,
                    num_threads=threads)
    with budget_guard(budget):
        compiled = tp.compile(student, trainset=trainset, seed=seed)
    for attr in ("candidate_programs", "trial_logs"):
        if hasattr(compiled, attr):
            delattr(compiled, attr)
    for _, predictor in compiled.named_predictors():
        predictor.lm = None  # SIMBA sets sampling LMs on copies; artifacts carry prompts only
    settings = {"bsize": bsize, "num_candidates": num_candidates, "max_steps": max_steps,
                "max_demos": max_demos, "prompt_lm": _lm_name(prompt_lm),
                "n_train": len(trainset)}
    return compiled, settings


class budget_guard:  # noqa: N801 - a context manager, named like one
    """While active, every ``dspy.Predict`` call checks the budget first and raises
    :class:`~ambiqa.optimizers.budget.BudgetExhausted` once it is spent.

    Neither GEPA's evaluations nor SIMBA have a budget hook between program runs; both score
    a run that raises as a failure (0) and go on, and both treat a failed proposal or rule as
    no change, so after the budget is spent no further LM call is made. Not re-entrant across
    threads started outside the compile (none are).
    """

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self._had_own = False
        self._orig: Any = None

    def __enter__(self) -> budget_guard:
        budget = self.budget
        self._had_own = "__call__" in dspy.Predict.__dict__
        orig = dspy.Predict.__call__
        self._orig = orig

        def call(predictor: Any, *args: Any, **kwargs: Any) -> Any:
            budget.check()
            return orig(predictor, *args, **kwargs)

        dspy.Predict.__call__ = call  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._had_own:
            dspy.Predict.__call__ = self._orig  # type: ignore[method-assign]
        else:
            del dspy.Predict.__call__
