"""A training signal for every inner predictor, and demos chosen against it.

Bootstrapping keeps whole traces whose *final* answer scored well. For a multi-stage program
that tunes the inner predictors only through the end score: in Diva the traces that score are
the ones where the verifier said yes, so both of the verifier's demos answer yes and compiled
Diva never takes its closed-book path. Each inner predictor has a cheaper, sharper signal in
the gold data of a training split; this module computes it.

=========================  =====================================================================
predictor (signature)      signal, from the example's gold qa pairs
=========================  =====================================================================
``VerifyRetrieval``        Diva's verifier: a gold short answer occurs (whole words, SQuAD-
                           normalised) in the passages it judged → ``yes``, else ``no``.
``SelfVerify*``            ToC's self-verification: the node's answer is a gold short answer
                           (:func:`is_gold_answer`) → ``yes`` (keep), else ``no`` (prune).
``InterpretFromPassage``   VerDICt's per-passage read: the passage states a gold short answer →
                           ``interpretation``, else ``abstain``.
``TypeAmbiguity``,         Diva's typing and rewriting: the share of gold qa pairs whose answer
``PseudoInterpretations``  one of the program's readings gives (:func:`coverage`); a call counts
                           as right when the readings cover at least half of them. The class of
                           a typing call is the type it wrote (demos are balanced across types).
``ClarifyFromPassages``    clarification (Diva, ToC): coverage of the gold qa pairs by the
                           pairs it wrote, times the share of them whose answers are distinct
                           (a duplicated reading costs); right at half or more.
``WriteLongAnswer``        the long-answer writer: the share of the distinct readings it was
                           given that the answer states, times the share of the gold qa pairs
                           it states (STR-EM), times how near its length is to the references'
                           (shorter/longer ratio of word counts); right at half or more. So a
                           demo states every reading, rightly, in the references' form -- not
                           one confident reading it was given alone (compile-v5's first
                           writer signal demo: one reading, wrong, "a well-known fact").
=========================  =====================================================================

:func:`collect_traces` runs a program on training questions with DSPy's trace on and keeps
every predictor call; :func:`signal_demos` picks each signalled predictor's ``k`` demos
among those calls, balanced across the signal's classes (a ``yes`` and a ``no`` for a
verifier), preferring calls the signal says were right and, among those, calls from traces
with the better end score. A class with no right call is filled by *relabelling* a call whose
input belongs to it (the verifier shown passages without the answer, with ``no`` as its
output), so both classes are shown even when the model never answered one of them correctly.
Predictors without a signal (closed book, ReSP's and EoR's short-answer readers) keep the
demos the end metric chose. :func:`accuracy_from_rows` and :func:`accuracy_from_traces`
report each predictor's accuracy against its signal, from stored ``results.jsonl`` rows or
from collected traces.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import dspy

from ambiqa.evaluation.metrics import (
    answer_in_passages,
    field_value,
    normalize_answer,
    short_answers_of,
    str_em,
    token_f1,
)
from ambiqa.optimizers.budget import Budget, BudgetExhausted
from ambiqa.parallel import run_parallel
from ambiqa.signatures.verification import parse_verdict
from ambiqa.tracing import record_event

#: a reading "gives" a gold answer when its answer has at least this token F1 with an alias
ANSWER_MATCH_F1 = 0.6
#: typing / rewriting count as right when the readings cover at least this share of gold pairs
COVERAGE_OK = 0.5

YES, NO = "yes", "no"
INTERPRET, ABSTAIN = "interpretation", "abstain"
VERIFIERS = ("VerifyRetrieval",)
SELF_VERIFIERS = ("SelfVerify", "SelfVerifyEvidence", "SelfVerifyStrict")
READERS = ("InterpretFromPassage",)
READING_MAKERS = ("TypeAmbiguity", "PseudoInterpretations")
CLARIFIERS = ("ClarifyFromPassages",)
WRITERS = ("WriteLongAnswer",)
SIGNALLED = VERIFIERS + SELF_VERIFIERS + READERS + READING_MAKERS + CLARIFIERS + WRITERS


@dataclass(frozen=True)
class Judgement:
    """One predictor call judged against its signal.

    ``expected`` is the class the signal asks for (None for score-only signals), ``predicted``
    the class the call produced (None: unreadable), ``score`` 1/0 for class signals and the
    coverage for typing/rewriting.
    """

    signature: str
    expected: str | None
    predicted: str | None
    score: float

    @property
    def correct(self) -> bool:
        if self.expected is None:
            return self.score >= COVERAGE_OK
        return self.predicted == self.expected


# ---- gold helpers ---------------------------------------------------------------------------
def gold_answers(example: Any) -> list[str]:
    """Every short answer (all aliases) of the example's qa pairs."""
    return [a for pair in field_value(example, "qa_pairs", []) or []
            for a in short_answers_of(pair)]


def is_gold_answer(answer: str, example: Any) -> bool:
    """Is ``answer`` one of the example's gold short answers: same normalised text, whole-word
    containment either way ("the 2018 final" / "2018"), or token F1 >= :data:`ANSWER_MATCH_F1`
    with an alias?"""
    a = normalize_answer(answer)
    if not a:
        return False
    for gold in gold_answers(example):
        g = normalize_answer(gold)
        if not g:
            continue
        if a == g or f" {g} " in f" {a} " or f" {a} " in f" {g} ":
            return True
        if token_f1(answer, [gold]) >= ANSWER_MATCH_F1:
            return True
    return False


def states_gold(texts: Iterable[str], example: Any) -> bool:
    """Does any gold short answer occur, as whole normalised words, in ``texts``?"""
    answers = gold_answers(example)
    texts = [str(t) for t in texts if str(t).strip()]
    return bool(answers and texts and answer_in_passages(answers, texts))


def coverage(readings: Iterable[Any], example: Any) -> float:
    """Share of the example's gold qa pairs whose answer one of ``readings`` gives (a reading
    is an interpretation dict/object with an ``answer``, or a plain answer string)."""
    pairs = field_value(example, "qa_pairs", []) or []
    answers = [str(field_value(r, "answer", r) if not isinstance(r, str) else r)
               for r in readings]
    answers = [a for a in answers if normalize_answer(a)]
    if not pairs:
        return 0.0
    hit = 0
    for pair in pairs:
        golds = short_answers_of(pair)
        hit += any(is_gold_answer(a, {"qa_pairs": [{"short_answers": golds}]}) for a in answers)
    return hit / len(pairs)


# ---- judging one call -----------------------------------------------------------------------
def _bool_class(value: Any) -> str | None:
    if isinstance(value, bool):
        return YES if value else NO
    verdict = parse_verdict(value)
    return None if verdict is None else (YES if verdict else NO)


def judge_call(signature: str, inputs: dict[str, Any], outputs: dict[str, Any], example: Any,
               prediction: Any = None) -> Judgement | None:
    """Judge one call of a signalled predictor; None for a predictor with no signal (or a
    typing/rewriting call when the program's readings are unknown)."""
    if signature in VERIFIERS:
        expected = YES if states_gold([inputs.get("passages", "")], example) else NO
        return _class_judgement(signature, expected, _bool_class(outputs.get("verdict")))
    if signature in SELF_VERIFIERS:
        expected = YES if is_gold_answer(str(inputs.get("answer", "")), example) else NO
        raw = outputs.get("valid", outputs.get("verdict"))
        return _class_judgement(signature, expected, _bool_class(raw))
    if signature in READERS:
        expected = INTERPRET if states_gold([inputs.get("passage", "")], example) else ABSTAIN
        return _class_judgement(signature, expected, _read_class(outputs))
    if signature in READING_MAKERS:
        if prediction is None:
            return None
        readings = field_value(prediction, "interpretations", []) or []
        cls = (str(outputs.get("ambiguity_type")) if signature == "TypeAmbiguity"
               else "rewrite")
        return Judgement(signature, None, cls, coverage(readings, example))
    if signature in CLARIFIERS:
        return Judgement(signature, None, "clarify",
                         clarify_score(outputs.get("pairs"), example,
                                       str(inputs.get("question", ""))))
    if signature in WRITERS:
        given = given_answers(str(inputs.get("interpretations", "")))
        return Judgement(signature, None, "write",
                         writer_score(str(outputs.get("long_answer", "")), given, example))
    return None


def clarify_score(pairs: Any, example: Any, question: str = "") -> float:
    """Coverage of the gold qa pairs by the written pairs' answers, times the share of the
    written pairs whose answers are distinct (two readings with one answer are one reading),
    times the share whose question adds a word to the asked ``question`` (a "reading" that
    only restates the question specifies nothing; compile-v5 shipped a clarify demo that
    repeated the question in all five pairs, and the 1.5B copied it)."""
    pairs = [p for p in (pairs or []) if normalize_answer(str(field_value(p, "answer", "") or ""))]
    if not pairs:
        return 0.0
    answers = [str(field_value(p, "answer", "")) for p in pairs]
    distinct = len({normalize_answer(a) for a in answers}) / len(answers)
    specific = (sum(not restates(str(field_value(p, "question", "") or ""), question)
                    for p in pairs) / len(pairs)) if question else 1.0
    return coverage(answers, example) * distinct * specific


def restates(reading: str, question: str) -> bool:
    """True when ``reading`` adds no word to ``question`` (case, punctuation and articles
    aside): it repeats or shortens the question rather than specifying it."""
    return set(normalize_answer(reading).split()) <= set(normalize_answer(question).split())


def given_answers(interpretations: str) -> list[str]:
    """The distinct answers of the ``- question -> answer`` lines a writer was given."""
    seen: dict[str, str] = {}
    for line in interpretations.splitlines():
        _, arrow, answer = line.partition(" -> ")
        if arrow and normalize_answer(answer):
            seen.setdefault(normalize_answer(answer), answer.strip())
    return list(seen.values())


def reference_words(example: Any) -> float | None:
    """Median word count of the example's reference long answers (None without any)."""
    longs = [len(str(t).split()) for t in field_value(example, "long_answers", []) or []]
    longs = sorted(n for n in longs if n)
    return float(longs[len(longs) // 2]) if longs else None


def writer_score(long_answer: str, given: list[str], example: Any) -> float:
    """Share of the ``given`` readings' answers the long answer states (1 when it was given
    none), times its STR-EM against the example's gold qa pairs (1 without any), times
    min/max of its length and the references' median length (1 without one).

    The gold factor is what keeps a one-reading call out of the demos: stating "every
    reading given" is trivially whole when the writer was given one, and a demo that states
    one reading confidently teaches the writer to drop the others (compile-v5: such a demo,
    chosen without it, cost STR-EM on every validation question it changed)."""
    words = len(long_answer.split())
    if not words:
        return 0.0
    stated = (sum(answer_in_passages([a], [long_answer]) for a in given) / len(given)
              if given else 1.0)
    gold = field_value(example, "qa_pairs", []) or []
    right = str_em(long_answer, gold) if gold else 1.0
    ref = reference_words(example)
    form = min(words, ref) / max(words, ref) if ref else 1.0
    return stated * right * form


def _class_judgement(signature: str, expected: str, predicted: str | None) -> Judgement:
    return Judgement(signature, expected, predicted, float(predicted == expected))


_EMPTY = {"", "none", "null", "n/a", "unknown", "-"}


def _read_class(outputs: dict[str, Any]) -> str | None:
    abstain = outputs.get("abstain")
    interp = str(outputs.get("interpretation") or "").strip().lower().strip(" .")
    answer = str(outputs.get("answer") or "").strip().lower().strip(" .")
    if abstain is True or interp in _EMPTY or answer in _EMPTY:
        return ABSTAIN
    return INTERPRET


# ---- relabelling: a demo of a class no call got right ----------------------------------------
def _first_sentence_with(answers: list[str], text: str) -> str:
    for line in str(text).splitlines():
        if answers and answer_in_passages(answers, [line]):
            return line.strip()
    return "none"


def relabel(signature: str, inputs: dict[str, Any], outputs: dict[str, Any], example: Any,
            expected: str) -> dict[str, Any] | None:
    """Outputs a right call would have given for ``inputs`` (None: no relabelling for this
    predictor). Only the fields the signal decides change, plus the verifier's evidence
    (the passage line that holds the gold answer, or "none")."""
    out = dict(outputs)
    if signature in VERIFIERS:
        out["verdict"] = expected
        out["evidence"] = (_first_sentence_with(gold_answers(example), inputs.get("passages", ""))
                           if expected == YES else "none")
        return out
    if signature in SELF_VERIFIERS:
        if "valid" in out or signature == "SelfVerify" or signature == "SelfVerifyStrict":
            out["valid"] = expected == YES
        if signature == "SelfVerifyEvidence":
            out["verdict"] = expected
            out["evidence"] = (_first_sentence_with([str(inputs.get("answer", ""))],
                                                    inputs.get("passage", ""))
                               if expected == YES else "none")
        return out
    if signature in READERS:
        if expected == ABSTAIN:
            return {**out, "abstain": True, "interpretation": "none", "answer": "none"}
        text = str(inputs.get("passage", ""))
        for pair in field_value(example, "qa_pairs", []) or []:
            for ans in short_answers_of(pair):
                if answer_in_passages([ans], [text]):
                    return {**out, "abstain": False,
                            "interpretation": str(field_value(pair, "question", "")),
                            "answer": ans}
        return None
    return None


# ---- traces ---------------------------------------------------------------------------------
@dataclass
class Step:
    """One predictor call inside a program run."""

    predictor: str  # the name in ``named_predictors()``
    signature: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]


@dataclass
class TraceRecord:
    """A program run on one training example: its prediction, end score and every call."""

    example: Any
    prediction: Any
    score: float
    steps: list[Step] = field(default_factory=list)


def collect_traces(program: dspy.Module, examples: list[Any], metric: Callable[..., float] | None,
                   budget: Budget | None = None, threads: int = 1,
                   say: Callable[[str], None] | None = None) -> list[TraceRecord]:
    """Run ``program`` on each example with DSPy's trace on; keep every predictor call.

    A failing run is skipped (recorded as an event); with a ``budget`` no new example starts
    once it is spent (``budget.stopped``). ``threads``: examples answered at once, each in its
    own trace (DSPy's settings are per context, and :func:`~ambiqa.parallel.run_parallel`
    gives every example its own copy), for an LM that serves several calls at once; the
    records come back in the examples' order, as with one thread. ``say`` gets a line per
    finished example (on the 1.5B a pass over 24 questions takes most of an hour).
    """
    names = {id(p): n for n, p in program.named_predictors()}
    finished = _Counter(len(examples), say)

    def one(ex: Any) -> TraceRecord | None:
        with dspy.context(trace=[]):
            try:
                pred = program(question=ex.question)
            except Exception as exc:  # one failing question must not end the collection
                record_event("signal", f"trace failed: {type(exc).__name__}: {exc}"[:200])
                return None
            trace = list(dspy.settings.trace or [])
        score = 0.0
        if metric is not None:
            try:
                score = float(metric(ex, pred))
            except (TypeError, ValueError):
                score = 0.0
            score = 0.0 if score != score else score  # NaN
        steps = []
        for predictor, inputs, outputs in trace:
            name = names.get(id(predictor))
            if name is None:
                continue
            out = dict(outputs.items()) if hasattr(outputs, "items") else {}
            steps.append(Step(name, predictor.signature.__name__, dict(inputs), out))
        finished.tick(len(steps))
        return TraceRecord(ex, pred, score, _canonical(steps))

    if threads <= 1:  # stop at the first spent budget, as the one-thread loop always did
        records: list[TraceRecord] = []
        for ex in examples:
            if budget is not None and _spent(budget):
                break
            record = one(ex)
            if record is not None:
                records.append(record)
        return records

    def started(ex: Any) -> TraceRecord | None:  # a spent budget starts no new example
        return None if budget is not None and _spent(budget) else one(ex)

    return [r for r in run_parallel(started, examples, max_workers=threads) if r is not None]


def _canonical(steps: list[Step]) -> list[Step]:
    """``steps`` with each predictor's calls in a fixed order (by their inputs).

    Diva and ToC ask their verifier about a question's readings at once, so those calls
    reach the trace in whatever order they finish, interleaved with any other predictor
    called concurrently; the demos chosen from a trace must not depend on that (the same
    pass twice gave two verifier demo sets). Each predictor's calls are sorted and put back
    into the positions its calls held, so the pattern of predictors is kept."""
    def key(s: Step) -> str:
        return repr(sorted(s.inputs.items(), key=str))

    by_predictor: dict[str, list[Step]] = {}
    for step in steps:
        by_predictor.setdefault(step.predictor, []).append(step)
    queues = {name: iter(sorted(calls, key=key)) for name, calls in by_predictor.items()}
    return [next(queues[step.predictor]) for step in steps]


class _Counter:
    """Finished examples of a traced pass, said as they come (from any thread)."""

    def __init__(self, total: int, say: Callable[[str], None] | None) -> None:
        self.total, self.say, self.done = total, say, 0
        self.started = time.perf_counter()
        self.lock = threading.Lock()

    def tick(self, calls: int) -> None:
        if self.say is None:
            return
        with self.lock:
            self.done += 1
            line = (f"signal pass: {self.done}/{self.total} training questions traced "
                    f"({calls} predictor calls in the last, "
                    f"{time.perf_counter() - self.started:.0f} s so far)")
        self.say(line)


def _spent(budget: Budget) -> bool:
    """Whether the budget is used up (``check`` marks it stopped, as it always has)."""
    try:
        budget.check()
    except BudgetExhausted:
        return True
    return False


# ---- demo choice ----------------------------------------------------------------------------
@dataclass
class _Candidate:
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    judgement: Judgement
    end_score: float
    relabeled: bool = False


def _classes(signature: str) -> tuple[str, ...]:
    if signature in VERIFIERS or signature in SELF_VERIFIERS:
        return (YES, NO)
    if signature in READERS:
        return (INTERPRET, ABSTAIN)
    return ()


def signal_demos(program: dspy.Module, records: list[TraceRecord], k: int, seed: int = 0,
                 ) -> dict[str, dict[str, Any]]:
    """Give each signalled predictor of ``program`` ``k`` demos chosen against its signal (in
    place); return, per predictor, what was chosen (classes, relabelled, candidates).

    Class signals: demos alternate between the classes (``yes``/``no``, ``interpretation``/
    ``abstain``); within a class the right calls come first, best end score first; a class with
    no right call takes a relabelled call whose input belongs to it. Coverage signals: calls
    whose readings cover at least :data:`COVERAGE_OK` of the gold pairs, best coverage (then
    end score) first, alternating across the types the typing wrote. A predictor with no
    candidate keeps its demos.
    """
    rng = random.Random(seed)
    by_name: dict[str, list[_Candidate]] = {}
    for rec in records:
        for step in rec.steps:
            if step.signature not in SIGNALLED:
                continue
            j = judge_call(step.signature, step.inputs, step.outputs, rec.example,
                           rec.prediction)
            if j is None:
                continue
            cand = _Candidate(step.inputs, step.outputs, j, rec.score)
            by_name.setdefault(step.predictor, []).append(cand)
            if _classes(step.signature) and not j.correct and j.expected is not None:
                fixed = relabel(step.signature, step.inputs, step.outputs, rec.example,
                                j.expected)
                if fixed is not None:
                    by_name[step.predictor].append(_Candidate(
                        step.inputs, fixed, Judgement(j.signature, j.expected, j.expected, 1.0),
                        rec.score, relabeled=True))
    report: dict[str, dict[str, Any]] = {}
    for name, predictor in program.named_predictors():
        cands = by_name.get(name)
        if not cands or k <= 0:
            continue
        rng.shuffle(cands)  # ties broken by seed, not by training order
        sig = predictor.signature.__name__
        classes = _classes(sig)
        if classes:
            chosen = _pick_balanced(cands, classes, k, key=lambda c: c.judgement.expected,
                                    rank=lambda c: (not c.judgement.correct, c.relabeled,
                                                    -c.end_score))
        else:
            right = [c for c in cands if c.judgement.correct]
            kinds = tuple(dict.fromkeys(c.judgement.predicted for c in right))
            chosen = _pick_balanced(right, kinds, k, key=lambda c: c.judgement.predicted,
                                    rank=lambda c: (-c.judgement.score, -c.end_score))
        chosen = [c for c in chosen if c.judgement.correct]
        if not chosen:
            report[name] = {"candidates": len(cands), "demos": 0, "kept_previous": True}
            continue
        predictor.demos = [dspy.Example(augmented=True, **c.inputs, **c.outputs)
                           for c in chosen]
        report[name] = {
            "candidates": sum(not c.relabeled for c in cands),
            "right": sum(c.judgement.correct and not c.relabeled for c in cands),
            "demos": len(chosen),
            "classes": [c.judgement.expected or c.judgement.predicted for c in chosen],
            "relabeled": sum(c.relabeled for c in chosen)}
    return report


def _pick_balanced(cands: list[_Candidate], classes: tuple[Any, ...], k: int,
                   key: Callable[[_Candidate], Any], rank: Callable[[_Candidate], Any],
                   ) -> list[_Candidate]:
    """Round-robin over ``classes``, each queue ordered by ``rank``; no input shown twice."""
    queues = {c: sorted([x for x in cands if key(x) == c], key=rank) for c in classes}
    out: list[_Candidate] = []
    seen: set[str] = set()
    while len(out) < k and any(queues.values()):
        for c in classes:
            while queues[c]:
                cand = queues[c].pop(0)
                ident = repr(sorted(cand.inputs.items()))
                if ident in seen:
                    continue
                seen.add(ident)
                out.append(cand)
                break
            if len(out) >= k:
                break
    return out


# ---- accuracy against the signals -----------------------------------------------------------
def _tally(judgements: list[Judgement]) -> dict[str, Any]:
    n = len(judgements)
    out: dict[str, Any] = {"n": n}
    if not n:
        return out
    out["accuracy"] = round(sum(j.correct for j in judgements) / n, 4)
    if judgements[0].expected is None:
        out["mean_coverage"] = round(sum(j.score for j in judgements) / n, 4)
        return out
    by: dict[str, dict[str, int]] = {}
    for j in judgements:
        cell = by.setdefault(str(j.expected), {"n": 0, "right": 0})
        cell["n"] += 1
        cell["right"] += j.correct
    out["by_expected"] = by
    out["predicted"] = {str(c): sum(j.predicted == c for j in judgements)
                        for c in dict.fromkeys(j.predicted for j in judgements)}
    return out


def accuracy_from_traces(records: list[TraceRecord]) -> dict[str, dict[str, Any]]:
    """Per predictor name, its accuracy against its signal over the collected calls."""
    found: dict[str, list[Judgement]] = {}
    for rec in records:
        for step in rec.steps:
            j = judge_call(step.signature, step.inputs, step.outputs, rec.example,
                           rec.prediction)
            if j is not None:
                found.setdefault(step.predictor, []).append(j)
    return {name: _tally(js) for name, js in sorted(found.items())}


def judge_row(prediction: dict[str, Any], example: Any) -> dict[str, list[Judgement]]:
    """Judgements recoverable from one stored ``results.jsonl`` prediction (no LM call).

    Diva rows keep the kept passages, every vote and the path: each vote is judged
    (``verify``), and so is the path (``verify.path``: RAG expected iff the kept passages
    hold a gold answer; an ``Unverified`` verdict counts as the RAG path). ToC rows keep the
    tree: each created node's kept/pruned state is judged against its answer
    (``self_verify``). VerDICt rows keep every passage read and the candidates: a passage
    cited by a candidate (or a rejected one) was read as an interpretation, any other as an
    abstention (``interpret``). Typing/rewriting are judged by the readings' coverage
    (``infer.type_ambiguity``, ``infer.pseudo_interpretations``).
    """
    out: dict[str, list[Judgement]] = {}
    passages = prediction.get("passages") or []
    texts = [str(p.get("text", "")) for p in passages if isinstance(p, dict)]
    if "votes" in prediction:  # Diva
        holds = states_gold(texts, example)
        expected = YES if holds else NO
        for vote in prediction.get("votes") or []:
            s = vote.get("supported")
            out.setdefault("verify", []).append(_class_judgement(
                "VerifyRetrieval", expected, None if s is None else (YES if s else NO)))
        path = prediction.get("path")
        if path:
            out["verify.path"] = [_class_judgement(
                "VerifyRetrieval", "rag" if holds else "closed_book", str(path))]
        cov = coverage(prediction.get("interpretations") or [], example)
        if prediction.get("ambiguity_type") is not None:
            out["infer.type_ambiguity"] = [Judgement(
                "TypeAmbiguity", None, str(prediction.get("ambiguity_type")), cov)]
        if prediction.get("pseudo_interpretations"):
            out["infer.pseudo_interpretations"] = [Judgement(
                "PseudoInterpretations", None, "rewrite", cov)]
    if "tree" in prediction:  # ToC
        for node in prediction.get("tree") or []:
            if node.get("parent") is None:
                continue
            expected = YES if is_gold_answer(str(node.get("answer", "")), example) else NO
            kept = bool(node.get("valid"))  # the verifier's own call (restoring is not)
            out.setdefault("self_verify", []).append(
                _class_judgement("SelfVerify", expected, YES if kept else NO))
    if "candidates" in prediction and "n_abstained" in prediction:  # VerDICt
        cited = {str(c.get("passage")) for c in (prediction.get("candidates") or [])}
        cited |= {str(c.get("passage")) for c in (prediction.get("rejected") or [])}
        # an unreadable reply leaves its passage uncited too; when a row has any, only the
        # cited passages can be told apart from abstentions
        sure = not int(prediction.get("n_dropped") or 0)
        for p in passages:
            if not isinstance(p, dict) or (str(p.get("id")) not in cited and not sure):
                continue
            expected = INTERPRET if states_gold([p.get("text", "")], example) else ABSTAIN
            out.setdefault("interpret", []).append(_class_judgement(
                "InterpretFromPassage", expected,
                INTERPRET if str(p.get("id")) in cited else ABSTAIN))
    return out


def accuracy_from_rows(rows: Iterable[dict[str, Any]], examples: dict[str, Any],
                       ) -> dict[str, dict[str, Any]]:
    """Per predictor, accuracy against its signal over stored run rows (``results.jsonl``
    lines with ``id`` and ``prediction``); ``examples`` maps question ids to gold examples.
    Rows with an error, no prediction or no gold example are skipped (counted)."""
    found: dict[str, list[Judgement]] = {}
    skipped = 0
    for row in rows:
        pred, ex = row.get("prediction"), examples.get(str(row.get("id")))
        if row.get("error") or not isinstance(pred, dict) or ex is None:
            skipped += 1
            continue
        for name, js in judge_row(pred, ex).items():
            found.setdefault(name, []).extend(js)
    out = {name: _tally(js) for name, js in sorted(found.items())}
    out["_rows"] = {"skipped": skipped}
    return out
