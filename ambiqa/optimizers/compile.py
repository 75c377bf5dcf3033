"""Compile a program with a DSPy teleprompter against a metric, on a training split only.

Optimizers:

* ``none`` -- the program as written (zero-shot), for a baseline artifact;
* ``labeled`` -- DSPy's LabeledFewShot idea, per predictor: each predictor whose signature
  can be labeled from gold training data (see :mod:`ambiqa.optimizers.demos`) gets ``k``
  demos sampled with a fixed seed. No LM call.
* ``bootstrap`` -- ``dspy.BootstrapFewShot``: run the program (with labeled demos as the
  teacher, where available) on training questions and keep the traces whose metric passes the
  threshold as demos for every predictor, including those no gold data labels (Diva's typing
  and verification, ToC's self-verification, ...).

The result is returned together with a compile report (cost, chosen demos per predictor).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import dspy

from ambiqa.errors import ConfigError
from ambiqa.optimizers.demos import labeled_demos
from ambiqa.tracing import track

OPTIMIZERS = ("none", "labeled", "bootstrap")


@dataclass
class CompileReport:
    optimizer: str
    settings: dict[str, Any]
    demos_per_predictor: dict[str, int] = field(default_factory=dict)
    cost: dict[str, Any] = field(default_factory=dict)


def apply_labeled(program: dspy.Module, pools: dict[str, list[Any]], k: int,
                  seed: int) -> dict[str, int]:
    """Give each labelable predictor ``k`` gold demos from ``pools`` (signature name → demos,
    see :func:`labeled_demos`); return demo counts per predictor."""
    rng = random.Random(seed)
    counts = {}
    for name, predictor in program.named_predictors():
        sig = predictor.signature.__name__
        pool = pools.get(sig, [])
        predictor.demos = rng.sample(pool, min(k, len(pool))) if pool else []
        counts[name] = len(predictor.demos)
    return counts


def compile_program(program: dspy.Module, trainset: list[Any], *, optimizer: str = "bootstrap",
                    metric: Any = None, k: int = 2, seed: int = 0, threshold: float | None = None,
                    max_rounds: int = 1) -> tuple[dspy.Module, CompileReport]:
    """Return ``(compiled program, report)``. ``trainset`` must come from a training split."""
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"unknown optimizer {optimizer!r}", hint=f"choose one of {OPTIMIZERS}")
    if not trainset:
        raise ConfigError("the training set is empty")
    settings = {"k": k, "seed": seed, "threshold": threshold, "max_rounds": max_rounds}
    report = CompileReport(optimizer=optimizer, settings=settings)
    with track() as trace:
        if optimizer == "none":
            compiled = program
        elif optimizer == "labeled":
            compiled = program.deepcopy()
            pools = labeled_demos(trainset)
            if not pools:
                raise ConfigError("no training example yields labeled demos",
                                  hint="ASQA-style data with qa_pairs and long answers is needed")
            apply_labeled(compiled, pools, k, seed)
        else:
            if metric is None:
                raise ConfigError("bootstrap needs a metric (e.g. --metric d-f1)")
            teacher = program.deepcopy()
            apply_labeled(teacher, labeled_demos(trainset), k, seed)

            def passes(example, pred, trace=None):
                score = metric(example, pred, trace)
                return score >= threshold if threshold is not None else score > 0

            tp = dspy.BootstrapFewShot(metric=passes, max_bootstrapped_demos=k,
                                       max_labeled_demos=0, max_rounds=max_rounds)
            rng = random.Random(seed)
            shuffled = list(trainset)
            rng.shuffle(shuffled)
            compiled = tp.compile(program.deepcopy(), teacher=teacher, trainset=shuffled)
            # A predictor for which no trace passed the metric keeps the teacher's gold demos
            # rather than none: with small models, labeled demos carry the output format.
            teacher_demos = {n: p.demos for n, p in teacher.named_predictors()}
            for name, predictor in compiled.named_predictors():
                if not predictor.demos and teacher_demos.get(name):
                    predictor.demos = list(teacher_demos[name])
    report.demos_per_predictor = {n: len(p.demos) for n, p in compiled.named_predictors()}
    report.cost = trace.summary()
    return compiled, report
