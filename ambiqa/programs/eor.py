"""Ensemble of Retrievers (EoR; Li et al. 2024, "Unraveling and Mitigating Retriever
Inconsistencies in Retrieval-Augmented Large Language Models", Sec. 4.1).

Different retrievers fail on different questions, and a reader's mistakes vary from one
context to the next while right answers tend to agree; so answer once per retriever and keep
the answer the others agree with most.

Paper steps, as implemented:

1. A pool of M retrievers, each a knowledge source plus processing, written as specs
   (``Wiki@10``, ``Wiki@RR@5``, ``BM25@5&Wiki@5``, ``Wiki@10@CP``, ``PK``, ``ReFree``; grammar
   and operation order in :mod:`ambiqa.retrieval.pool`, App. C.1).
2. The reader answers once per pool member from that member's passages:
   ``y_m = G(q, r_m(q))`` (one :class:`~ambiqa.signatures.answering.ShortAnswer` call each,
   run concurrently; ReFree reads no passages).
3. The voter compares every answer with every other under K similarity metrics and sums them
   with metric weights ω^s: ``S_sim(y_m, y_n) = Σ_i ω^s_i · sim_i(y_m, y_n)`` (eq. 6).
4. Each answer's M-1 similarities are pooled (mean, max, majority or plurality voting,
   App. C.4) and multiplied by the member's retriever weight ω^r_m, which is zeroed when it is
   not above the threshold t (eq. 7 with Sec. 4.2's ``ω^r_m · 1[ω^r_m > t]``).
5. The answer with the highest score wins (ties: the first in pool order).

Everything the weight search of Sec. 4.2 needs is in the prediction (member answers and the
per-metric similarity matrices), and :func:`vote` re-scores them with any other weights without
an LM call, so tuning ω^s, ω^r, t and the pooling costs nothing per trial.

The faithfulness table (paper step → code → test) and every deviation with its reason (an
empty member abstains; ``equivalence`` is a share of Σω^s; local sources stand in for web
search; @RR with MiniLM; per-passage @CP that copies sentences, an unparseable compression
keeping its passage whole; metric stand-ins; ignored and failed members; the hybrid
``(A&PK&B)@RR@k`` with PK's document as one unchunked passage) are in ``docs/methods.md#eor``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dspy
import numpy as np

from ambiqa.errors import ConfigError
from ambiqa.evaluation.metrics import exact_match, token_f1
from ambiqa.parallel import run_parallel
from ambiqa.programs.base import (
    AmbiqaProgram,
    SharedEncoder,
    as_data,
    format_passages,
    safe_step,
)
from ambiqa.programs.config import ProgramConfig, int_field, resolve_config
from ambiqa.retrieval.encoder import unit_rows
from ambiqa.retrieval.pool import (
    Background,
    Compress,
    Concat,
    GroupRerank,
    NoRetrieval,
    PoolMemo,
    PoolRetriever,
    SpecNode,
    parse_spec,
)
from ambiqa.signatures.answering import BackgroundDocument, ShortAnswer
from ambiqa.signatures.summarization import CompressForQuery
from ambiqa.signatures.verification import JudgeEntailment
from ambiqa.tracing import record_event
from ambiqa.types import Interpretation, Passage

METRICS = ("em", "f1", "emb", "entail")
POOLINGS = ("mean", "max", "majority", "plurality")
DEFAULT_METRIC_WEIGHTS = {"em": 1 / 3, "f1": 1 / 3, "emb": 1 / 3}
#: Members with weight at or below this are ignored (the paper's t = 0.1).
DEFAULT_THRESHOLD = 0.1


# ---- answer similarity ----------------------------------------------------------------------
def similarity_matrices(answers: Sequence[str], metrics: Sequence[str], *, encoder: Any = None,
                        judge: Any = None) -> dict[str, list[list[float]]]:
    """Pairwise similarity of ``answers`` under each metric, as M×M lists (diagonal 1.0).

    ``encoder.encode(texts)`` serves "emb" (rows scaled to unit length here, so it is a
    cosine whatever encoder was injected); ``judge(a, b) -> float | None``
    serves "entail" (None = the judge failed: counted as 0.0). Pairs whose answers are equal
    after normalization score 1.0 for "entail" without asking the judge.
    """
    m = len(answers)
    out: dict[str, list[list[float]]] = {}
    pairs = [(i, j) for i in range(m) for j in range(i + 1, m)]

    def fill(values: list[float]) -> list[list[float]]:
        mat = [[1.0] * m for _ in range(m)]
        for (i, j), v in zip(pairs, values, strict=True):
            mat[i][j] = mat[j][i] = round(float(v), 6)
        return mat

    for metric in metrics:
        if metric == "em":
            out["em"] = fill([exact_match(answers[i], answers[j]) for i, j in pairs])
        elif metric == "f1":
            out["f1"] = fill([token_f1(answers[i], answers[j]) for i, j in pairs])
        elif metric == "emb":
            vecs = unit_rows(encoder.encode(list(answers))).astype(np.float32) if m else None
            out["emb"] = fill([float(vecs[i] @ vecs[j]) for i, j in pairs])
        elif metric == "entail":
            if judge is None:
                raise ConfigError("the 'entail' metric needs an LM judge")
            todo = [(i, j) for i, j in pairs if not exact_match(answers[i], answers[j])]
            verdicts = dict(zip(todo, run_parallel(
                lambda ij: judge(answers[ij[0]], answers[ij[1]]), todo), strict=True))
            out["entail"] = fill([1.0 if (i, j) not in verdicts else (verdicts[(i, j)] or 0.0)
                                  for i, j in pairs])
        else:
            raise ConfigError(f"unknown similarity metric {metric!r}",
                              hint=f"choose from {', '.join(METRICS)}")
    return out


# ---- the voter (eq. 6-7, App. C.4) ----------------------------------------------------------
def equivalence_cut(equivalence: float, metric_weights: Mapping[str, float]) -> float:
    """The combined similarity above which two answers count as the same: ``equivalence``
    is a share of the largest combined similarity, Σω^s (two identical answers), so
    majority and plurality voting mean the same thing whatever the scale of the weights."""
    total = sum(float(w) for w in metric_weights.values() if w)
    return float(equivalence) * total


def _pool(values: list[float], pooling: str, equivalence: float) -> float:
    if pooling == "mean":
        return sum(values) / len(values) if values else 0.0
    if pooling == "max":
        return max(values) if values else 0.0
    if pooling == "majority":  # 1 if at least half of the others are equivalent answers
        return float(sum(v > equivalence for v in values) >= len(values) / 2)
    raise ConfigError(f"unknown pooling {pooling!r}", hint=f"choose from {', '.join(POOLINGS)}")


def vote(member_answers: Mapping[str, str], similarities: Mapping[str, Sequence[Sequence[float]]],
         metric_weights: Mapping[str, float], retriever_weights: Mapping[str, float] | None = None,
         threshold: float = DEFAULT_THRESHOLD, pooling: str = "mean", equivalence: float = 0.5,
         ) -> tuple[str | None, dict[str, float]]:
    """Score each member's answer and pick the winner, without any LM call.

    ``similarities[metric]`` is an M×M matrix aligned with ``member_answers``' order.
    ``retriever_weights`` default to 1.0 per member; a member whose weight is not above
    ``threshold`` neither wins nor votes (score 0.0). ``equivalence`` (App. C.4's ``s``) is the
    share of Σω^s above which two answers count as the same for majority and plurality voting
    (:func:`equivalence_cut`), so scaling every metric weight by one factor changes no vote.
    Returns ``(winning spec or None if no member is active, {spec: score})``; ties go to the
    first member in order.
    """
    if pooling not in POOLINGS:
        raise ConfigError(f"unknown pooling {pooling!r}", hint=f"choose from {', '.join(POOLINGS)}")
    members = list(member_answers)
    m = len(members)
    combined = np.zeros((m, m), dtype=np.float64)
    for metric, weight in metric_weights.items():
        if metric not in METRICS:
            raise ConfigError(f"unknown similarity metric {metric!r}",
                              hint=f"choose from {', '.join(METRICS)}")
        if not weight or m == 0:
            continue
        if metric not in similarities:
            raise ConfigError(f"metric {metric!r} has weight {weight} but no similarities were "
                              "computed for it", hint="compute it, or give it weight 0")
        mat = np.asarray(similarities[metric], dtype=np.float64).reshape(-1)
        if mat.size != m * m:
            raise ConfigError(f"similarities[{metric!r}] is not {m}x{m}")
        combined += float(weight) * mat.reshape(m, m)
    weights = retriever_weights or {}
    w = [float(weights.get(spec, 1.0)) for spec in members]
    active = [i for i in range(m) if w[i] > threshold]
    others = {i: [float(combined[i, j]) for j in active if j != i] for i in active}
    cut = equivalence_cut(equivalence, metric_weights)
    if pooling == "plurality":
        counts = {i: sum(v > cut for v in others[i]) for i in active}
        top = max(counts.values(), default=0)
        pooled = {i: float(counts[i] == top) for i in active}
    else:
        pooled = {i: _pool(others[i], pooling, cut) for i in active}
    scores = {spec: 0.0 for spec in members}
    for i in active:
        scores[members[i]] = round(w[i] * pooled[i], 9)
    winner = None
    for i in active:  # first maximum in pool order
        if winner is None or scores[members[i]] > scores[members[winner]]:
            winner = i
    return (members[winner] if winner is not None else None), scores


# ---- the program ----------------------------------------------------------------------------
class _StepFailed(Exception):
    """An LM step a pool member depends on produced no usable output."""


def _clean(text: object) -> str:
    return " ".join(str(text or "").split()).strip()


def _check_weight(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < 0:
        raise ConfigError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def lm_rounds_before_reading(node: SpecNode) -> int:
    """Dependent LM rounds a member's passages take before its reader runs: 1 for PK's
    background document, 1 more for @CP over them (every passage compressed concurrently);
    searching and re-ranking make no LM call. ``PK&Wiki@5@CP`` takes 2: PK, then @CP."""
    if isinstance(node, Background):
        return 1
    if isinstance(node, Compress):
        return 1 + lm_rounds_before_reading(node.child)
    if isinstance(node, Concat):
        return max((lm_rounds_before_reading(p) for p in node.parts), default=0)
    if isinstance(node, GroupRerank):
        return lm_rounds_before_reading(node.child)
    return 0


def default_pool(sources: Sequence[str] = ()) -> tuple[str, ...]:
    """A 4-6 member pool over ``Wiki`` plus whichever of ``BM25`` / ``Dense`` are supplied.

    Mirrors the paper's mix (plain top-k, re-ranked, a two-source concatenation, parametric
    knowledge, retrieval-free) at about one LM call per member; compressed members are left
    out of the default because each costs one extra call per passage.
    """
    names = {s.lower(): s for s in sources}
    pool = ["Wiki@10", "Wiki@RR@5"]
    if "bm25" in names:
        pool.append(f"{names['bm25']}@5&Wiki@5")
    if "dense" in names:
        pool.append(f"{names['dense']}@5")
    return (*pool, "PK", "ReFree")


@dataclass(frozen=True)
class EoRConfig(ProgramConfig):
    """EoR's settings, the single source of their defaults (the program checks and
    normalises them: specs parsed, weights checked against the pool).

    Attributes:
        pool: the member specs (None: :func:`default_pool` over the sources given).
        metric_weights: ω^s over "em", "f1", "emb", "entail" (None:
            :data:`DEFAULT_METRIC_WEIGHTS`).
        retriever_weights: ω^r per spec (default 1.0 each).
        threshold: t of :func:`vote`: members weighted at or below it do not vote.
        pooling: how a member's similarities to the others are pooled (:data:`POOLINGS`).
        equivalence: App. C.4's ``s``, the similarity at which two answers count as one.
        similarity_metrics: always computed and recorded (for tuning), even at weight 0.
        rerank_depth: the candidate list @RR re-ranks.
    """

    label = "eor: "
    pool: Sequence[str] | str | None = None
    metric_weights: Mapping[str, float] | None = None
    retriever_weights: Mapping[str, float] | None = None
    threshold: float = DEFAULT_THRESHOLD
    pooling: str = "mean"
    equivalence: float = 0.5
    similarity_metrics: Sequence[str] = ("em", "f1", "emb")
    rerank_depth: int = int_field(20)


class EoR(AmbiqaProgram):
    """Ensemble of Retrievers: one short answer per retriever, then a similarity vote.

    Args: ``retriever`` is the ``Wiki`` source; ``sources`` names further retrievers;
    ``config``, an :class:`EoRConfig` (or a dict of its fields), holds the settings, each
    described there, and keyword ``settings`` override single fields; ``encoder`` defaults to
    the shared MiniLM.
    """

    name = "eor"
    # no answer writer to stream: each retriever's reader writes a candidate and the vote
    # picks the answer after them (a stream gets the Prediction alone)
    writes_answer: dict[str, str] = {}
    # minimal dependent LM rounds (AmbiqaProgram.min_lm_rounds), default pool: PK writes its
    # background document -> every member's reader in one parallel round. __init__ applies it
    # to the pool: 1 + the deepest active member's LM steps before reading
    # (lm_rounds_before_reading): 1 without PK/@CP members, 3 for PK&Wiki@5@CP. "entail" adds
    # a judge round only when two answers differ, so not to the minimum.
    min_lm_rounds = 2
    answer_style = "short"

    encoder = SharedEncoder()

    config_class = EoRConfig

    def __init__(self, retriever=None, sources: Mapping[str, Any] | None = None,
                 config: EoRConfig | dict[str, Any] | None = None, *, encoder: Any = None,
                 **settings: Any) -> None:
        super().__init__(retriever)
        cfg = resolve_config(EoRConfig, config, settings, owner="EoR")
        self.settings = cfg
        pool, metric_weights = cfg.pool, cfg.metric_weights
        retriever_weights, threshold = cfg.retriever_weights, cfg.threshold
        pooling, equivalence = cfg.pooling, cfg.equivalence
        similarity_metrics, rerank_depth = cfg.similarity_metrics, cfg.rerank_depth
        self.sources = dict(sources or {})
        if pool is None:
            pool = default_pool(list(self.sources))
        if isinstance(pool, str):
            pool = (pool,)
        self._nodes: dict[str, SpecNode] = {}
        lowered: dict[str, str] = {}  # specs differing only in case are the same retriever
        for spec in pool:
            node = parse_spec(spec)
            key = str(node)
            if key.lower() in lowered:
                raise ConfigError(f"retriever spec {spec!r} is listed twice in the pool")
            lowered[key.lower()] = key
            self._nodes[key] = node
        if not self._nodes:
            raise ConfigError("the EoR pool is empty", hint="give at least one retriever spec")
        self.pool = tuple(self._nodes)

        self.metric_weights = dict(DEFAULT_METRIC_WEIGHTS if metric_weights is None
                                   else metric_weights)
        for metric, weight in self.metric_weights.items():
            if metric not in METRICS:
                raise ConfigError(f"unknown similarity metric {metric!r}",
                                  hint=f"choose from {', '.join(METRICS)}")
            self.metric_weights[metric] = _check_weight(f"metric weight {metric!r}", weight)
        for metric in similarity_metrics:
            if metric not in METRICS:
                raise ConfigError(f"unknown similarity metric {metric!r}",
                                  hint=f"choose from {', '.join(METRICS)}")
        self.similarity_metrics = tuple(dict.fromkeys(
            [*similarity_metrics, *(m for m, w in self.metric_weights.items() if w)]))

        self.retriever_weights: dict[str, float] = {}
        for spec, weight in (retriever_weights or {}).items():
            key = lowered.get(str(parse_spec(spec)).lower(), "")
            if key not in self._nodes:
                raise ConfigError(f"retriever weight given for {spec!r}, which is not in the pool",
                                  hint=f"the pool is: {', '.join(self.pool)}")
            self.retriever_weights[key] = _check_weight(f"weight of {spec!r}", weight)
        self.threshold = _check_weight("threshold", threshold) if threshold else 0.0
        if pooling not in POOLINGS:
            raise ConfigError(f"unknown pooling {pooling!r}",
                              hint=f"choose from {', '.join(POOLINGS)}")
        self.pooling = pooling
        self.equivalence = float(equivalence)
        self.rerank_depth = rerank_depth  # checked by EoRConfig
        if not self.active_members():
            raise ConfigError(f"every pool member's weight is at or below the threshold "
                              f"t={self.threshold}", hint="lower the threshold or raise a weight")
        self.min_lm_rounds = 1 + max(lm_rounds_before_reading(self._nodes[spec])
                                     for spec in self.active_members())
        self.encoder = encoder

        self.reader = dspy.Predict(ShortAnswer)
        self.background_writer = dspy.Predict(BackgroundDocument)
        self.compressor = dspy.Predict(CompressForQuery)
        self.judge = dspy.Predict(JudgeEntailment)

    # ---- configuration ---------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        return {"pool": list(self.pool), "metric_weights": dict(self.metric_weights),
                "retriever_weights": dict(self.retriever_weights), "threshold": self.threshold,
                "pooling": self.pooling, "equivalence": self.equivalence,
                "similarity_metrics": list(self.similarity_metrics),
                "rerank_depth": self.rerank_depth}

    def weight(self, spec: str) -> float:
        return self.retriever_weights.get(spec, 1.0)

    def active_members(self) -> list[str]:
        return [s for s in self.pool if self.weight(s) > self.threshold]

    def all_sources(self) -> dict[str, Any]:
        """The named sources: ``sources`` plus the program's retriever as ``Wiki``."""
        out = dict(self.sources)
        if self.retriever is not None:
            out = {k: v for k, v in out.items() if k.lower() != "wiki"}
            out["Wiki"] = self.retriever
        return out

    # ---- LM steps handed to the pool ---------------------------------------------------------
    def _write_background(self, question: str) -> str:
        pred = safe_step("eor.pk", lambda: self.background_writer(question=question), None)
        text = _clean(getattr(pred, "background", "")) if pred is not None else ""
        if not text:
            raise _StepFailed("no background document (PK) could be produced")
        return text

    def _compress_passage(self, question: str, passage: Passage) -> str:
        pred = safe_step("eor.compress", lambda: self.compressor(
            query=question, document=as_data(passage.render())), None)
        if pred is None:  # an unparseable reply says nothing about relevance (an empty one
            return passage.text  # does): read the passage as retrieved, not lose it (traced)
        return _clean(pred.relevant)

    def _judge_same(self, question: str, a: str, b: str) -> float | None:
        pred = safe_step("eor.entail", lambda: self.judge(
            question=question, answer_a=a, answer_b=b), None)
        return None if pred is None else float(bool(pred.same))

    # ---- the method ---------------------------------------------------------------------------
    def run(self, question: str) -> dict[str, Any]:
        members = self.active_members()
        ignored = [s for s in self.pool if s not in members]
        pool = PoolRetriever(self.all_sources(), background=self._write_background,
                             compress=self._compress_passage, encoder=_LazyEncoder(self),
                             rerank_depth=self.rerank_depth)
        for spec in members:  # a missing source is a config error: fail before any LM call
            pool.check(self._nodes[spec])
        memo = PoolMemo()
        for spec in members:  # searches and re-ranking here; only LM steps run concurrently
            pool.prefetch(self._nodes[spec], question, memo)

        def answer(spec: str) -> tuple[str, list[Passage], str]:
            """(answer, passages, failure reason) for one member: retrieve, then read."""
            node = self._nodes[spec]
            try:
                passages = pool.run(node, question, memo)
            except _StepFailed as exc:
                return "", [], str(exc)
            if not passages and not isinstance(node, NoRetrieval):
                # its source found nothing or compression dropped every passage: reading an
                # empty context would only add one more vote from memory (PK and ReFree
                # already vote from memory, on purpose), so the member abstains
                return "", [], "no passages to read (empty source or all compressed away)"
            pred = safe_step(f"eor.reader[{spec}]", lambda: self.reader(
                question=question, passages=format_passages(passages)), None)
            if pred is None:
                return "", passages, "reader output could not be parsed"
            text = _clean(pred.answer)
            return text, passages, "" if text else "reader gave an empty answer"

        results = dict(zip(members, run_parallel(answer, members), strict=True))
        member_answers: dict[str, str] = {}
        member_passages: dict[str, list[Passage]] = {}
        failed: dict[str, str] = {}
        for spec, (text, passages, reason) in results.items():
            if reason:
                failed[spec] = reason
                record_event("eor", f"member {spec} dropped from the vote: {reason}")
            else:
                member_answers[spec] = text
                member_passages[spec] = passages

        answers = list(member_answers.values())
        similarities = similarity_matrices(
            answers, self.similarity_metrics,
            encoder=self.encoder if "emb" in self.similarity_metrics and answers else None,
            judge=lambda a, b: self._judge_same(question, a, b))
        winner, scores = vote(member_answers, similarities, self.metric_weights,
                              self.retriever_weights, self.threshold, self.pooling,
                              self.equivalence)
        if winner is None:
            record_event("eor", "no pool member produced an answer")
            final, passages, interpretations = "", [], []
        else:
            final, passages = member_answers[winner], member_passages[winner]
            interpretations = [Interpretation(question, final, [p.id for p in passages])]
        return {
            "answer": final,
            "interpretations": interpretations,
            "passages": passages,
            "winner": winner,
            "member_answers": member_answers,
            "member_passages": {s: [p.id for p in ps] for s, ps in member_passages.items()},
            "failed_members": failed,
            "ignored_members": ignored,
            "similarities": similarities,
            "scores": scores,
        }


class _LazyEncoder:
    """Loads the program's encoder only if a pool member actually re-ranks."""

    def __init__(self, program: EoR) -> None:
        self.program = program

    def encode(self, texts: Sequence[str], **kwargs: Any) -> np.ndarray:
        return self.program.encoder.encode(texts, **kwargs)
