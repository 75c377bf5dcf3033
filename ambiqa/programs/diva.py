"""Diva: diversify, verify, adapt (retrieval-augmented answering of ambiguous questions).

See :class:`Diva` for the algorithm and every place this implementation departs from the paper.
:class:`InferInterpretations` (ambiguity typing + pseudo-interpretations, eq. 3) is a module of
its own because the query-refinement baseline reuses it.
"""

from __future__ import annotations

import re
from typing import Any

import dspy
import numpy as np

from ambiqa.errors import ConfigError
from ambiqa.parallel import run_parallel
from ambiqa.programs.base import AmbiqaProgram, format_passages, safe_step
from ambiqa.programs.steps import ClarifyStep, ClosedBookStep, LongAnswerStep
from ambiqa.signatures.ambiguity import AMBIGUITY_TYPES, TypeAmbiguity
from ambiqa.signatures.disambiguation import PseudoInterpretations
from ambiqa.signatures.verification import VerifyInterpretation
from ambiqa.tracing import record_event
from ambiqa.types import Passage

USEFUL, PARTIAL, USELESS = "Useful", "PartialUseful", "Useless"

# "1: ...", "2. ...", "DQ 3: ...", "- ...", "(4) ..." → the question alone.
_ENUM = re.compile(r"^\s*(?:[-*•]+\s*)?(?:(?:DQ|Q)?\s*\(?\d+(?:[:)]\s*|[.\-]\s+))?",
                   re.IGNORECASE)


def _positive_int(name: str, value: object, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


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


class InferInterpretations(dspy.Module):
    """Eq. 3: type the ambiguity (with a reason), then rewrite the question per reading.

    Returns ``{"ambiguity_type", "reason", "interpretations"}``. The question is its own only
    interpretation when the type is ``None`` (no second call is made) and whenever a step's
    output cannot be parsed or yields nothing usable (recorded as a trace event), so callers
    always get at least one query to work with.
    """

    def __init__(self, max_interpretations: int = 8) -> None:
        super().__init__()
        self.max_interpretations = _positive_int("max_interpretations", max_interpretations)
        self.type_ambiguity = dspy.Predict(TypeAmbiguity)
        self.pseudo_interpretations = dspy.Predict(PseudoInterpretations)

    def forward(self, question: str) -> dict[str, Any]:
        typed = safe_step("type_ambiguity", lambda: self.type_ambiguity(question=question), None)
        if typed is None:
            return {"ambiguity_type": None, "reason": "", "interpretations": [question]}
        kind = str(typed.ambiguity_type)
        reason = " ".join(str(typed.reason or "").split())
        if kind not in AMBIGUITY_TYPES:  # Literal parsing guarantees this; be safe anyway
            record_event("type_ambiguity", f"degraded: unknown type {kind!r}")
            return {"ambiguity_type": None, "reason": reason, "interpretations": [question]}
        if kind == "None":
            return {"ambiguity_type": kind, "reason": reason, "interpretations": [question]}
        pred = safe_step("pseudo_interpretations", lambda: self.pseudo_interpretations(
            question=question, ambiguity_type=kind, reason=reason), None)
        found = ([] if pred is None else
                 clean_interpretations(pred.interpretations, self.max_interpretations))
        if not found:
            if pred is not None:
                record_event("pseudo_interpretations", "degraded: no usable rewrite; "
                                                       "using the question itself")
            found = [question]
        return {"ambiguity_type": kind, "reason": reason, "interpretations": found}


class Diva(AmbiqaProgram):
    """Diva (diversify-verify-adapt), Algorithm 1 of the paper, one step per line:

    1. **Type the ambiguity** (eq. 3, inner call): one of AmbSub, AmbObj, AmbPred, AmbTime,
       AmbLoc or None, with a reason.
    2. **Pseudo-interpretations** (eq. 3, outer call): rewrite the question once per reading,
       conditioned on the type and reason. Type None → the question is the only reading.
    3. **Retrieval diversification** (eq. 4): the top ``k_per_query`` passages for every
       pseudo-interpretation, unioned (deduplicated by passage id). As in eq. 4, the union is
       over the interpretations; the question itself defines the paper's candidate pool C_i
       (see ``candidates`` below) rather than adding passages of its own.
    4. **Pruning** (eq. 5): score each passage in the union by its cosine similarity to each
       pseudo-interpretation, averaged over all of them, with a sentence encoder; keep the
       ``top_k`` best (the paper's |P_i| = 5). Passages carry that mean cosine as ``score``.
    5. **Retrieval verification** (eq. 7): one LM call per pseudo-interpretation: can it be
       answered from the kept passages (yes/no)? The calls are independent and run
       concurrently. All yes → Useful, none → Useless, otherwise PartialUseful.
    6. **Adaptive generation**: Useful or PartialUseful → RAG (eq. 1: clarify the question
       into DQ/DA pairs from the kept passages, :class:`ClarifyStep`; eq. 2: write the long
       answer from pairs and passages, :class:`LongAnswerStep`). Useless → closed-book answer
       to the question alone (the paper's I_l prompt, :class:`ClosedBookStep`).

    Prediction extras: ``ambiguity_type``, ``reason``, ``pseudo_interpretations``,
    ``pool_size`` (passages in the union), ``votes`` (``[{interpretation, supported}]``;
    ``supported`` is null where the verifier's reply could not be parsed), ``verdict`` and
    ``path`` (``"rag"`` | ``"closed_book"``).

    On the closed-book path ``interpretations`` is empty: the paper's closed-book prompt sees
    only the question, so no interpretation is answered on its own; the unanswered readings
    stay in ``pseudo_interpretations``. ``passages`` is the kept set on both paths (the
    program read them to verify; it is what MRecall@k of the diversified retrieval measures).

    Deviations from the paper, and why:

    * Encoder: all-MiniLM-L6-v2 (the only SentenceBERT available offline here) instead of the
      paper's SentenceBERT; injectable with ``encoder=`` (any object with ``.encode(texts)``).
    * Retriever: the paper's C_i comes from ColBERT plus Bing for the question, and R in
      eq. 4 reranks C_i with SentenceBERT. There is no web search here. By default
      (``candidates=0``) the given retriever is R and searches the whole corpus once per
      interpretation, i.e. C_i is the corpus. With ``candidates=N`` the paper's two stages
      are reproduced: the retriever fetches N passages for the question (C_i) and the encoder
      picks each interpretation's top ``k_per_query`` from them.
    * Typing yields one label; the paper's prompt may list several types. One label keeps the
      output a closed set a small model can emit and parse.
    * ``max_interpretations`` (default 8) caps the rewrites kept: a cost guard against a small
      model listing dozens, which the paper (GPT-4) did not need.
    * Type None skips the rewrite call (the paper still runs it; its rewrite of an
      unambiguous question is the question).
    * An unparseable verification counts as "no" (null in ``votes``, recorded); if none
      parses, the verdict is Useless and the closed-book path is taken.
    * Prompts are our own wording with DSPy's field layout, zero-shot until compiled; the
      paper used hand-written few-shot prompts chosen by nearest neighbour with GPT-3.5/4.
    """

    name = "diva"
    # minimal dependent LM rounds: type (None: no rewrite) -> verify (parallel) -> closed
    # book when Useless; 5 on the RAG path with a rewrite (type, rewrite, verify, clarify, write)
    min_lm_rounds = 3

    def __init__(self, retriever=None, k_per_query: int = 5, top_k: int = 5,
                 candidates: int = 0, max_interpretations: int = 8, encoder=None) -> None:
        super().__init__(retriever)
        self.k_per_query = _positive_int("k_per_query", k_per_query)
        self.top_k = _positive_int("top_k", top_k)
        self.candidates = _positive_int("candidates", candidates, minimum=0)
        self.encoder = encoder
        self.infer = InferInterpretations(max_interpretations)
        self.verify = dspy.Predict(VerifyInterpretation)
        self.clarify = ClarifyStep()
        self.long_answer = LongAnswerStep()
        self.closed_book = ClosedBookStep()

    def config(self) -> dict[str, Any]:
        return {"k_per_query": self.k_per_query, "top_k": self.top_k,
                "candidates": self.candidates,
                "max_interpretations": self.infer.max_interpretations}

    # ---- helpers ---------------------------------------------------------------------------
    def _encode(self, texts: list[str]) -> np.ndarray:
        """Row-normalized embeddings, so a dot product is eq. 5's cosine whatever the encoder."""
        if self.encoder is None:  # loaded on first use: building a program stays cheap
            from ambiqa.retrieval.encoder import get_encoder

            self.encoder = get_encoder()
        vecs = np.asarray(self.encoder.encode(texts), dtype=np.float64)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        return vecs / np.maximum(norms, 1e-12)

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

    def verify_all(self, queries: list[str], passages: list[Passage]
                   ) -> tuple[list[dict[str, Any]], str]:
        """Eq. 7: one yes/no call per query against all kept passages, run concurrently."""
        if not passages:
            record_event("verify", "no passages retrieved; treating retrieval as Useless")
            return [{"interpretation": q, "supported": False} for q in queries], USELESS
        context = format_passages(passages)

        def check(query: str) -> bool | None:
            pred = safe_step("verify", lambda: self.verify(
                interpretation=query, passages=context), None)
            return None if pred is None else bool(pred.supported)

        results = run_parallel(check, queries)
        votes = [{"interpretation": q, "supported": r}
                 for q, r in zip(queries, results, strict=True)]
        if all(r is None for r in results):
            record_event("verify", "degraded: no verification parsed; treating as Useless")
        yes = sum(1 for r in results if r is True)
        verdict = USEFUL if yes == len(results) else USELESS if yes == 0 else PARTIAL
        return votes, verdict

    # ---- Algorithm 1 -----------------------------------------------------------------------
    def run(self, question: str) -> dict[str, Any]:
        inferred = self.infer(question=question)
        queries: list[str] = inferred["interpretations"]
        pool = self.diversify(question, queries)
        kept = self.prune(queries, pool)
        votes, verdict = self.verify_all(queries, kept)
        if verdict in (USEFUL, PARTIAL):
            path = "rag"
            pairs = self.clarify(question=question, passages=kept)
            answer = self.long_answer(question=question, pairs=pairs, passages=kept)
        else:
            path, pairs = "closed_book", []
            answer = self.closed_book(question=question)
        return {
            "interpretations": pairs, "answer": answer, "passages": kept,
            "ambiguity_type": inferred["ambiguity_type"], "reason": inferred["reason"],
            "pseudo_interpretations": queries, "pool_size": len(pool),
            "votes": votes, "verdict": verdict, "path": path,
        }
