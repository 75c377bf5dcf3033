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
  of 4) and a final pass of its candidates over the training set. ``--predictor-signal``,
  and ``signal`` or ``bootstrap`` demo sources in ``--demos`` or ``--candidates``, add a
  pass over the training set each (:func:`training_passes`);
* the choice runs zero-shot and the compiled program in full on the validation questions;
  a candidate plan pays what it changes (:func:`variant_lm_calls`).

Token counts come from the LM's usage reports (characters / 4 for the fake endpoint, word
counts for the scripted LM); treat the result as an order of magnitude, not a quote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ambiqa.optimizers.demo_plan import ALIASES, match_predictor
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
    return {"n_sample": len(examples), "lm_calls": calls,
            **{stat: (by_sig.get(sig) or {}).get("calls", 0) / n
               for sig, stat in _DOWNSTREAM.items()},
            "input_tokens": prog.input_tokens / n, "output_tokens": prog.output_tokens / n,
            "metric_lm_calls": scoring.lm_calls / n,
            "metric_tokens": (scoring.input_tokens + scoring.output_tokens) / n,
            "sample_lm_calls_spent": prog.lm_calls + scoring.lm_calls}


def _program_calls(optimizer: str, n_train: int, n_val: int, num_candidates: int,
                   trials: int) -> tuple[float, float]:
    """(program calls with no demos, program calls with demos) a teleprompter makes."""
    return get_teleprompter(optimizer).program_calls(n_train, n_val, num_candidates, trials)


#: the signatures a demo plan may change without re-running anything upstream of them (the
#: long answer's last steps) -> the per-question call count measured for each
_DOWNSTREAM = {"WriteLongAnswer": "writer_lm_calls",
               "ClarifyFromPassages": "clarify_lm_calls",
               "ClosedBookLongAnswer": "closed_book_lm_calls"}
#: demo sources that run the program over the training questions to find their demos
_LEARNED = ("signal", "bootstrap")


def _source_name(src: Any) -> str:
    return str(src).split(":")[0].strip().lower()


def _signature_of(key: str, program: Any = None) -> str:
    """The signature a demo-plan ``key`` designates: matched against ``program``'s predictors
    as the compile matches it (:func:`~ambiqa.optimizers.demo_plan.match_predictor`), or,
    without a program, through the same role aliases (or the signature's own name)."""
    if program is not None:
        name = match_predictor(program, key)
        return dict(program.named_predictors())[name].signature.__name__
    want = str(key).strip().lower().replace("-", "_")
    return ALIASES.get(want) or next((sig for sig in _DOWNSTREAM if sig.lower() == want), want)


def variant_lm_calls(per_q: dict[str, float], variants: Sequence[Mapping[str, Any]],
                     program: Any = None) -> float:
    """LM calls per validation question that the demo-plan ``variants`` add to a selection.

    A plan that changes only the last steps (the writer, clarify, closed book) pays their
    calls; everything upstream is answered from the call memo. The writer is priced at one
    call at least (a one-question sample that went closed book measured none, and a
    writer-only plan is never free). A plan that changes any other predictor (typing, the
    verifier, ...) re-runs what follows it and is priced as the whole program (an upper
    bound: steps before it still come from the memo). Keys resolve against ``program``
    where given (:func:`_signature_of`)."""
    full = per_q.get("lm_calls", 0.0)
    total = 0.0
    for plan in variants:
        stats = {_DOWNSTREAM.get(_signature_of(key, program)) for key in plan}
        if None in stats:
            total += full
            continue
        total += sum(max(per_q.get(stat, 0.0), 1.0 if stat == "writer_lm_calls" else 0.0)
                     for stat in stats if stat)
    return total


def training_passes(variants: Sequence[Mapping[str, Any]] = (),
                    plan: Mapping[str, Any] | None = None,
                    predictor_signal: bool = False) -> int:
    """Passes over the training questions that ``signal`` and ``bootstrap`` demo sources make:
    one per distinct program they trace (a plan's other entries are applied before the pass,
    so plans that agree on those trace the same program, and the second pass is answered
    from the response cache); the compile's own ``plan`` and ``--predictor-signal`` one more
    each."""
    traced = set()
    for variant in variants:
        if any(_source_name(src) in _LEARNED for src in variant.values()):
            traced.add(frozenset((str(k), str(v)) for k, v in variant.items()
                                 if _source_name(v) not in _LEARNED))
    own = plan is not None and any(_source_name(src) in _LEARNED for src in plan.values())
    return len(traced) + int(own) + int(predictor_signal)


def estimate(per_q: dict[str, float], *, optimizer: str, n_train: int, n_val: int = 0,
             k: int = 2, num_candidates: int = 4, trials: int = 0, n_dev: int = 0,
             n_predictors: int = 1, tune_pools: bool = False, n_select: int = 0,
             n_variants: int = 0, variants: Sequence[Mapping[str, Any]] | None = None,
             passes: int = 0, program: Any = None) -> dict[str, Any]:
    """LM calls and tokens for one compile (``optimizer``) or one tuning study (``trials``
    trials scored on ``n_val`` held-out questions, pools bootstrapped once if
    ``tune_pools``), plus scoring ``n_dev`` dev questions.

    ``n_select`` validation questions for the choice (:mod:`ambiqa.optimizers.select`): the
    zero-shot program and the compiled one each run in full on them (the input program is
    the zero-shot one unless it came with demos), and each of ``n_variants`` writer-only
    candidates pays only its writer calls (``per_q["writer_lm_calls"]``), the rest coming
    from the call memo. ``variants`` (the plans themselves, e.g. ``compile.DEFAULT_VARIANTS``)
    replaces ``n_variants``: each pays the calls of the predictors it changes
    (:func:`variant_lm_calls`). ``passes``: traced passes over the ``n_train`` training
    questions that demo sources make (:func:`training_passes`). ``program``: the program the
    plans' keys name predictors of (priced by the signature each key matches)."""
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
    downstream = (variant_lm_calls(per_q, variants, program) if variants is not None
                  else n_variants * per_q.get("writer_lm_calls", 0.0))
    selection = n_select * (2 * c + downstream)
    signal_pass = passes * n_train * c
    plain += n_select + passes * n_train  # zero-shot; the compiled one is counted below
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
            "training_pass_lm_calls": round(signal_pass),
            "per_question": {k_: round(v, 2) for k_, v in per_q.items()}}
