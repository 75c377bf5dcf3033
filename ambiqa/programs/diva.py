"""Diva: diversify, verify, adapt (retrieval-augmented answering of ambiguous questions).

See :class:`Diva` for the algorithm and ``docs/methods.md#diva`` for every place this
implementation departs from the paper.
:class:`InferInterpretations` (ambiguity typing + pseudo-interpretations, eq. 3) is a module of
its own because the query-refinement baseline reuses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import dspy
import numpy as np

from ambiqa.checks import check_int
from ambiqa.errors import ConfigError
from ambiqa.parallel import run_parallel
from ambiqa.programs.base import AmbiqaProgram, SharedEncoder, format_passages, safe_step
from ambiqa.programs.config import (
    ProgramConfig,
    bool_field,
    int_field,
    resolve_config,
    trim_field,
)
from ambiqa.programs.steps import ClarifyStep, ClosedBookStep, LongAnswerStep
from ambiqa.programs.streaming import announce
from ambiqa.programs.trim import trimmed_for
from ambiqa.retrieval.encoder import unit_rows
from ambiqa.signatures.ambiguity import AMBIGUITY_TYPES, TypeAmbiguity
from ambiqa.signatures.disambiguation import PseudoInterpretations
from ambiqa.signatures.verification import (
    VerifyRetrieval,
    VerifyRetrievalBrief,
    parse_verdict,
)
from ambiqa.tracing import record_event
from ambiqa.types import Passage

USEFUL, PARTIAL, USELESS = "Useful", "PartialUseful", "Useless"
#: Verdict when every verification vote abstained: nothing says the passages are bad, so the
#: program keeps them (RAG path), as ToC keeps its passages and as the paper finds RAG better
#: than closed-book overall.
UNVERIFIED = "Unverified"

#: The paper's decoding settings for every LLM call (App. A.4: max tokens 300, top-p 1.0,
#: temperature 0.3).
PAPER_DECODING: dict[str, float | int] = {"temperature": 0.3, "top_p": 1.0, "max_tokens": 300}

#: the verifier's evidence before its yes/no (``DivaConfig.verify_evidence``): a copied
#: sentence (default) or the answer's few words (fewer output tokens, issue 45)
VERIFIERS: dict[str, type[dspy.Signature]] = {"sentence": VerifyRetrieval,
                                              "brief": VerifyRetrievalBrief}

# "1: ...", "2. ...", "DQ 3: ...", "- ...", "(4) ..." → the question alone.
_ENUM = re.compile(r"^\s*(?:[-*•]+\s*)?(?:(?:DQ|Q)?\s*\(?\d+(?:[:)]\s*|[.\-]\s+))?",
                   re.IGNORECASE)


def decoding_config(temperature: float, top_p: float, max_tokens: int) -> dict[str, Any]:
    """Validated per-call LM settings, passed to each predictor as ``config=``.

    ``top_p`` is sent only when it filters something (< 1): 1.0 is every engine's default, and
    engines that do not know the parameter (the embedded one) would otherwise refuse it.
    """
    if not isinstance(temperature, int | float) or isinstance(temperature, bool) or \
            not 0.0 <= float(temperature) <= 2.0:
        raise ConfigError(f"temperature must be a number in [0, 2], got {temperature!r}")
    if not isinstance(top_p, int | float) or isinstance(top_p, bool) or \
            not 0.0 < float(top_p) <= 1.0:
        raise ConfigError(f"top_p must be a number in (0, 1], got {top_p!r}")
    cfg: dict[str, Any] = {"temperature": float(temperature),
                           "max_tokens": check_int("max_tokens", max_tokens)}
    if float(top_p) < 1.0:
        cfg["top_p"] = float(top_p)
    return cfg


def clean_interpretations(items: object, limit: int) -> list[str]:
    """Strip enumeration marks and blanks, drop case-insensitive duplicates, keep ``limit``.

    Small models often number their list items or repeat one rewrite; every kept item costs a
    retrieval and a verification call, so the cleaning matters for cost, not just looks.
    """
    if isinstance(items, str):
        items = items.splitlines()
    out: list[str] = []
    seen: set[str] = set()
    for item in items or []:
        text = " ".join(_ENUM.sub("", str(item or "")).split()).strip(" \"'")
        if not text or text.lower() in seen:
            continue
        seen.add(text.lower())
        out.append(text)
        if len(out) >= limit:
            break
    return out


@dataclass(frozen=True)
class DivaConfig(ProgramConfig):
    """Diva's settings, the single source of their defaults (``decoding_config`` checks the
    decoding).

    Attributes:
        k_per_query: K of eq. 4.
        top_k: |P_i| of eq. 5 (paper: 5).
        candidates: 0 (default): no separate C_i, R searches the corpus for each
            interpretation. N > 0: the paper's two stages: the retriever fetches N passages
            for the question (C_i) and the encoder picks each interpretation's top K from them.
        max_interpretations: cost guard on the rewrites kept (a small model may list dozens).
        skip_unambiguous: skip the rewrite call for a question typed None (off, as the paper).
        temperature, top_p, max_tokens: decoding of every LM call Diva makes. Defaults are the
            paper's (0.3, 1.0, 300; App. A.4) so the program behaves as published; pass
            ``temperature=0`` for runs that repeat exactly.
        trim_sentences: None (default, the paper): the verifier, clarify and writer prompts
            show whole passages. N >= 1: each kept passage is shown as its N sentences
            closest to the question and its interpretations (``ambiqa.programs.trim``, a
            declared deviation for fewer prompt tokens); ``passages`` in the output stay whole.
        verify_evidence: what each verification vote writes before its yes/no:
            ``"sentence"`` (default) copies the passage sentence that states the answer;
            ``"brief"`` writes the passage number and the answer's few words
            (:class:`~ambiqa.signatures.verification.VerifyRetrievalBrief`, a declared
            deviation for fewer output tokens; measured, off by default: docs/methods.md).
        answer_words: None (default, the paper's prompt) or N >= 20: the long-answer writer
            is asked to keep its answer under N words (a declared deviation for fewer output
            tokens; measured, off by default: docs/methods.md).
    """

    k_per_query: int = int_field(5)
    top_k: int = int_field(5)
    candidates: int = int_field(0, minimum=0)
    max_interpretations: int = int_field(8)
    skip_unambiguous: bool = bool_field(False)
    temperature: float = PAPER_DECODING["temperature"]
    top_p: float = PAPER_DECODING["top_p"]
    max_tokens: int = int_field(PAPER_DECODING["max_tokens"])
    trim_sentences: int | None = trim_field()
    verify_evidence: str = field(default="sentence", metadata={"choices": tuple(VERIFIERS)})
    answer_words: int | None = int_field(None, 20, none_ok=True,
                                         hint="None keeps the paper's writer prompt")

    def check(self) -> None:
        decoding_config(self.temperature, self.top_p, self.max_tokens)



class InferInterpretations(dspy.Module):
    """Eq. 3: type the ambiguity (with a reason), then rewrite the question per reading.

    Returns ``{"ambiguity_type", "reason", "interpretations"}``. As in the paper, the question
    is treated as ambiguous and the rewrite call always runs, also when the typing says
    ``None`` or cannot be parsed (then the rewrite sees type ``None`` and whatever reason was
    given). ``skip_unambiguous=True`` restores the shortcut of an earlier version: type
    ``None`` → the question is its only interpretation and no rewrite call is made. The
    question itself is the fallback whenever the rewrite yields nothing usable (recorded as a
    trace event), so callers always get at least one query to work with.
    """

    def __init__(self, max_interpretations: int = DivaConfig.max_interpretations,
                 skip_unambiguous: bool = DivaConfig.skip_unambiguous,
                 lm_config: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.max_interpretations = check_int("max_interpretations", max_interpretations)
        self.skip_unambiguous = bool(skip_unambiguous)
        self.lm_config = dict(lm_config or {})
        self.type_ambiguity = dspy.Predict(TypeAmbiguity)
        self.pseudo_interpretations = dspy.Predict(PseudoInterpretations)

    def forward(self, question: str) -> dict[str, Any]:
        cfg = self.lm_config
        typed = safe_step("type_ambiguity", lambda: self.type_ambiguity(
            question=question, config=cfg), None)
        kind: str | None = None
        reason = ""
        if typed is not None:
            kind = str(typed.ambiguity_type)
            reason = " ".join(str(typed.reason or "").split())
            if kind not in AMBIGUITY_TYPES:  # Literal parsing guarantees this; be safe anyway
                record_event("type_ambiguity", f"degraded: unknown type {kind!r}")
                kind = None
        if kind == "None" and self.skip_unambiguous:
            return {"ambiguity_type": kind, "reason": reason, "interpretations": [question]}
        pred = safe_step("pseudo_interpretations", lambda: self.pseudo_interpretations(
            question=question, ambiguity_type=kind or "None",
            reason=reason or "(no reason given)", config=cfg), None)
        found = ([] if pred is None else
                 clean_interpretations(pred.interpretations, self.max_interpretations))
        if not found:
            if pred is not None:
                record_event("pseudo_interpretations", "degraded: no usable rewrite; "
                                                       "using the question itself")
            found = [question]
        return {"ambiguity_type": kind, "reason": reason, "interpretations": found}


class Diva(AmbiqaProgram):
    """Diva (diversify-verify-adapt), Algorithm 1 of the paper.

    1. Type the ambiguity (eq. 3, inner call), with a reason; the question is presumed
       ambiguous.
    2. Pseudo-interpretations (eq. 3, outer call): always run.
    3. Retrieval diversification (eq. 4): top ``k_per_query`` per interpretation, unioned.
    4. Pruning (eq. 5): keep the ``top_k`` passages of highest mean cosine to all
       interpretations.
    5. Retrieval verification (eq. 7): one yes/no per interpretation against the kept passages
       (concurrent); unreadable votes abstain; Useful / PartialUseful / Useless over the votes
       that parsed, ``Unverified`` when none did.
    6. Adaptive generation: Useless → closed-book (I_l); otherwise RAG (eq. 1 clarify, eq. 2
       long answer from the pairs and passages).

    The faithfulness table (paper step → code → test) and every deviation with its reason are
    in ``docs/methods.md#diva``.

    Args:
        retriever: R of eq. 4 (by default it searches the whole corpus per interpretation).
        config: a :class:`DivaConfig` (or a dict of its fields); its fields are described
            there. Keyword ``settings`` override single fields: ``Diva(r, temperature=0)``.
        encoder: Enc of eq. 5 (default all-MiniLM-L6-v2); any object with ``.encode(texts)``.
    """

    name = "diva"
    # minimal dependent LM rounds when retrieval returns passages (AmbiqaProgram.min_lm_rounds):
    # type -> rewrite (always run, as in the paper) -> verify (parallel) -> closed book when
    # Useless; 5 on the RAG path (type, rewrite, verify, clarify, write). skip_unambiguous=True
    # drops the rewrite for a question typed None: 3 (__init__). With nothing retrieved there
    # is nothing to verify: type -> rewrite -> closed book, 3 (2 with the shortcut).
    min_lm_rounds = 4

    encoder = SharedEncoder()

    config_class = DivaConfig

    def __init__(self, retriever=None, config: DivaConfig | dict[str, Any] | None = None, *,
                 encoder=None, **settings: Any) -> None:
        super().__init__(retriever)
        self.use_config(resolve_config(DivaConfig, config, settings, owner="Diva"))
        if self.skip_unambiguous:
            self.min_lm_rounds = 3  # type None -> verify -> closed book (2 if none retrieved)
        self.encoder = encoder
        self.lm_config = decoding_config(self.temperature, self.top_p, self.max_tokens)
        self.infer = InferInterpretations(self.max_interpretations, self.skip_unambiguous,
                                          lm_config=self.lm_config)
        self.verify = dspy.Predict(VERIFIERS[self.verify_evidence])  # checked by DivaConfig
        self.clarify = ClarifyStep(lm_config=self.lm_config)
        self.long_answer = LongAnswerStep(lm_config=self.lm_config,
                                          max_words=self.answer_words)
        self.closed_book = ClosedBookStep(lm_config=self.lm_config)

    # ---- helpers ---------------------------------------------------------------------------
    def _encode(self, texts: list[str]) -> np.ndarray:
        """Row-normalized embeddings, so a dot product is eq. 5's cosine whatever the encoder."""
        return unit_rows(self.encoder.encode(texts))

    def _cosines(self, queries: list[str], passages: list[Passage]) -> np.ndarray:
        """Matrix (len(passages), len(queries)) of cosine similarities."""
        if not passages:
            return np.zeros((0, len(queries)))
        return self._encode([p.render() for p in passages]) @ self._encode(queries).T

    def diversify(self, question: str, queries: list[str]) -> list[Passage]:
        """Eq. 4: the union, deduplicated by id, of each query's top ``k_per_query``."""
        retriever = self.require_retriever()
        if self.candidates:
            pool = retriever.search(question, self.candidates)
            sims = self._cosines(queries, pool)
            k = min(self.k_per_query, len(pool))
            ranked = [[pool[i] for i in np.argsort(-sims[:, j], kind="stable")[:k]]
                      for j in range(len(queries))]
        else:
            ranked = retriever.batch_search(queries, self.k_per_query)
        union: dict[str, Passage] = {}
        for hits in ranked:
            for p in hits:
                union.setdefault(p.id, p)
        return list(union.values())

    def prune(self, queries: list[str], passages: list[Passage]) -> list[Passage]:
        """Eq. 5: keep the ``top_k`` passages with the highest mean cosine to all queries
        (ties keep retrieval order)."""
        if not passages:
            return []
        scores = self._cosines(queries, passages).mean(axis=1)
        order = sorted(range(len(passages)), key=lambda i: (-scores[i], i))[: self.top_k]
        return [passages[i].with_score(float(scores[i])) for i in order]

    def vote(self, query: str, context: str) -> tuple[bool | None, str]:
        """One eq. 7 call: (True yes / False no / None abstain, the quoted evidence).

        The passages come first in the prompt (shared by every vote of a question, so the
        engine's prompt cache reuses them); the verdict comes after the quoted evidence, so
        the small model looks for the answer before it decides.
        """
        pred = safe_step("verify", lambda: self.verify(
            passages=context, interpretation=query, config=self.lm_config), None)
        if pred is None:
            return None, ""
        supported = parse_verdict(pred.verdict)
        if supported is None:
            record_event("verify", f"abstained: unreadable verdict {str(pred.verdict)[:40]!r}")
        return supported, " ".join(str(pred.evidence or "").split())

    def verify_all(self, queries: list[str], passages: list[Passage],
                   shown: list[Passage] | None = None) -> tuple[list[dict[str, Any]], str]:
        """Eq. 7 over the kept passages (as ``shown`` to the LM, when trimmed); the verdict
        counts only the votes that parsed."""
        if not passages:
            record_event("verify", "no passages retrieved; treating retrieval as Useless")
            return [{"interpretation": q, "supported": False, "evidence": ""}
                    for q in queries], USELESS
        context = format_passages(passages if shown is None else shown)
        results = run_parallel(lambda q: self.vote(q, context), queries)
        votes = [{"interpretation": q, "supported": r, "evidence": ev}
                 for q, (r, ev) in zip(queries, results, strict=True)]
        parsed = [r for r, _ in results if r is not None]
        if not parsed:
            record_event("verify", "every vote abstained; verdict Unverified, taking the RAG "
                                   "path")
            return votes, UNVERIFIED
        yes = sum(parsed)
        verdict = USEFUL if yes == len(parsed) else USELESS if yes == 0 else PARTIAL
        return votes, verdict

    # ---- Algorithm 1 -----------------------------------------------------------------------
    def run(self, question: str) -> dict[str, Any]:
        inferred = self.infer(question=question)
        queries: list[str] = inferred["interpretations"]
        pool = self.diversify(question, queries)
        kept = self.prune(queries, pool)
        # what the prompts show: the kept passages, trimmed when trim_sentences is set (the
        # output's passages stay whole; cited numbers map to the same ids either way)
        shown = trimmed_for(self, kept, [question, *queries])
        votes, verdict = self.verify_all(queries, kept, shown)
        if verdict != USELESS:
            path = "rag"
            pairs = self.clarify(question=question, passages=shown)
            announce(pairs, kept)
            answer = self.long_answer(question=question, pairs=pairs, passages=shown)
        else:
            path, pairs = "closed_book", []
            announce([], kept)
            answer = self.closed_book(question=question)
        return {
            "interpretations": pairs, "answer": answer, "passages": kept,
            "ambiguity_type": inferred["ambiguity_type"], "reason": inferred["reason"],
            "pseudo_interpretations": queries, "pool_size": len(pool),
            "votes": votes, "verdict": verdict, "path": path,
            "abstained": sum(1 for v in votes if v["supported"] is None),
        }
