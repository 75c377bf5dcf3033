"""``--dry-run``: estimate the LM calls and tokens a compile or a tuning study will spend.

The estimate multiplies the cost of one program call, measured on a few training questions
(the *sample run*, which does spend those calls), by how many program calls the recipe makes:

* per question: ``c`` LM calls, ``t_in`` / ``t_out`` tokens (mean over the sample), plus the
  metric's own calls (an LM reader for D-F1) measured the same way;
* demos lengthen every prompt: each of up to ``k`` demos is counted as one more call's input
  and output, so compiled calls cost ``t_in + k * (t_in + t_out) / c`` input tokens;
* teleprompters: ``labeled`` runs nothing; ``bootstrap`` and ``knn`` run the teacher on at
  most every training question (an upper bound: bootstrapping stops once every predictor has
  its demos); ``bootstrap-rs`` scores 2 + N candidates on the held-out part and bootstraps N
  times; ``mipro`` bootstraps ``num_candidates`` sets, asks ~2 proposer calls per predictor
  and candidate, and scores each trial on the held-out part; a tuning study builds its pools
  once (one bootstrap pass) and scores every trial on the held-out part; ``gepa`` scores
  its default rollouts (three passes over train + held-out) plus a reflection call per ~4
  runs; ``simba`` runs its default 2 steps (sampling and candidate scoring on mini-batches
  of 4) and a final pass of its candidates over the training set. ``--predictor-signal``
  adds one pass over the training set (not counted here).

Token counts come from the LM's usage reports (characters / 4 for the fake endpoint, word
counts for the scripted LM); treat the result as an order of magnitude, not a quote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ambiqa.optimizers.registry import get_teleprompter
from ambiqa.tracing import track


def sample_cost(program: Any, examples: list[Any], metric: Any = None) -> dict[str, float]:
    """Run ``program`` (and ``metric``) on ``examples``; mean cost per question."""
    n = max(1, len(examples))
    with track() as prog:
        preds = []
        for ex in examples:
            try:
                preds.append((ex, program(question=ex.question)))
            except Exception:  # a failed sample still tells us its calls
                continue
    with track() as scoring:
        if metric is not None:
            for ex, pred in preds:
                try:
                    metric(ex, pred)
                except Exception:
                    pass
    calls = prog.lm_calls / n
    by_sig = prog.summary().get("by_signature") or {}
    writer = by_sig.get("WriteLongAnswer") or {}
    return {"n_sample": len(examples), "lm_calls": calls,
            "writer_lm_calls": writer.get("calls", 0) / n,
            "clarify_lm_calls": (by_sig.get("ClarifyFromPassages") or {}).get("calls", 0) / n,
            "input_tokens": prog.input_tokens / n, "output_tokens": prog.output_tokens / n,
            "metric_lm_calls": scoring.lm_calls / n,
            "metric_tokens": (scoring.input_tokens + scoring.output_tokens) / n,
            "sample_lm_calls_spent": prog.lm_calls + scoring.lm_calls}


def _program_calls(optimizer: str, n_train: int, n_val: int, num_candidates: int,
                   trials: int) -> tuple[float, float]:
    """(program calls with no demos, program calls with demos) a teleprompter makes."""
    return get_teleprompter(optimizer).program_calls(n_train, n_val, num_candidates, trials)


#: a demo plan's keys -> the per-question call count of the predictor they name
_VARIANT_CALLS = {"writer": "writer_lm_calls", "long_answer": "writer_lm_calls",
                  "write": "writer_lm_calls", "clarify": "clarify_lm_calls"}


def variant_lm_calls(per_q: dict[str, float],
                     variants: Sequence[Mapping[str, str]]) -> float:
    """LM calls per validation question that the demo-plan ``variants`` add to a selection:
    each pays the calls of the predictors it changes (writer, clarify); what runs upstream of
    them is answered from the call memo. A key with no measured count costs one writer's
    calls (a guess, never 0)."""
    writer = per_q.get("writer_lm_calls", 0.0)
    return sum(per_q.get(_VARIANT_CALLS.get(key, ""), writer)
               for plan in variants for key in plan)


def estimate(per_q: dict[str, float], *, optimizer: str, n_train: int, n_val: int = 0,
             k: int = 2, num_candidates: int = 4, trials: int = 0, n_dev: int = 0,
             n_predictors: int = 1, tune_pools: bool = False, n_select: int = 0,
             n_variants: int = 0, variants: Sequence[Mapping[str, str]] | None = None,
             ) -> dict[str, Any]:
    """LM calls and tokens for one compile (``optimizer``) or one tuning study (``trials``
    trials scored on ``n_val`` held-out questions, pools bootstrapped once if
    ``tune_pools``), plus scoring ``n_dev`` dev questions.

    ``n_select`` validation questions for the choice (:mod:`ambiqa.optimizers.select`): the
    zero-shot program and the compiled one each run in full on them (the input program is
    the zero-shot one unless it came with demos), and each of ``n_variants`` writer-only
    candidates pays only its writer calls (``per_q["writer_lm_calls"]``), the rest coming
    from the call memo. ``variants`` (the plans themselves, e.g. ``compile.DEFAULT_VARIANTS``)
    replaces ``n_variants``: each pays the calls of the predictors it changes
    (:func:`variant_lm_calls`)."""
    c = per_q["lm_calls"]
    t_in, t_out = per_q["input_tokens"], per_q["output_tokens"]
    per_call = (t_in + t_out) / c if c else 0.0
    if trials and optimizer == "tune":
        plain = 0.0
        with_demos = float(n_train if tune_pools else 0) + trials * n_val + n_dev
        proposer = 0.0
    else:
        plain, with_demos = _program_calls(optimizer, n_train, n_val, num_candidates, trials)
        with_demos += n_dev
        proposer = get_teleprompter(optimizer).proposer_calls(plain, n_predictors,
                                                              num_candidates)
    downstream = (variant_lm_calls(per_q, variants) if variants is not None
                  else n_variants * per_q.get("writer_lm_calls", 0.0))
    selection = n_select * (2 * c + downstream)
    plain += n_select  # the zero-shot candidate; the compiled one is counted below
    with_demos += n_select
    questions = plain + with_demos
    calls = questions * c + proposer + n_select * downstream
    demo_in = k * per_call * c  # extra input tokens per question from k demos per call
    tokens_in = questions * t_in + with_demos * demo_in + proposer * per_call
    tokens_out = questions * t_out + proposer * t_out / max(c, 1)
    metric_calls = questions * per_q.get("metric_lm_calls", 0.0)
    return {"program_questions": round(questions, 1), "lm_calls": round(calls),
            "metric_lm_calls": round(metric_calls),
            "total_lm_calls": round(calls + metric_calls),
            "input_tokens": round(tokens_in), "output_tokens": round(tokens_out),
            "selection_lm_calls": round(selection),
            "per_question": {k_: round(v, 2) for k_, v in per_q.items()}}
