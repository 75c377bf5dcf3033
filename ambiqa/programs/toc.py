"""Tree of Clarifications (ToC; Kim et al., EMNLP 2023) as an ambiqa program.

Recursive retrieval-augmented clarification in a BFS tree, pruned by self-verification, then
one long answer over the kept nodes. :class:`TreeOfClarifications` outlines the steps;
``docs/methods.md#tree-of-clarifications`` maps each to code and test and lists the deviations.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import dspy
import numpy as np

from ambiqa.errors import ConfigError
from ambiqa.parallel import default_workers, run_parallel
from ambiqa.programs.base import AmbiqaProgram, SharedEncoder, format_passages, safe_step
from ambiqa.programs.config import (
    ProgramConfig,
    bool_field,
    int_field,
    resolve_config,
    trim_field,
)
from ambiqa.programs.steps import ClarifyStep, LongAnswerStep
from ambiqa.programs.streaming import announce
from ambiqa.programs.trim import trimmed_for
from ambiqa.retrieval.encoder import unit_rows
from ambiqa.signatures.verification import (
    SelfVerify,
    SelfVerifyEvidence,
    SelfVerifyStrict,
    parse_verdict,
)
from ambiqa.text import normalize_answer
from ambiqa.tracing import record_event
from ambiqa.types import Interpretation, Passage

#: token Jaccard above which two DQs with the same answer count as one node
NEAR_IDENTICAL = 0.8
#: self-verification prompts: the paper's and its release's (AQ, passage, answer: could the
#: answer be correct?); the same check answered as a quoted sentence then yes/no ("evidence",
#: the encoding Diva's verifier needed with the 1.5B; an unreadable verdict keeps the node);
#: and a stricter one (the DQ must keep the AQ's scope, the passage must back the answer to it)
VERIFICATIONS = ("paper", "evidence", "strict")
_VERIFIERS = {"paper": SelfVerify, "evidence": SelfVerifyEvidence, "strict": SelfVerifyStrict}


@dataclass
class _Node:
    """One node of the tree. The root (id 0) holds the AQ and has no answer."""

    id: int
    parent: int | None
    depth: int
    question: str
    answer: str = ""
    evidence: list[Passage] = field(default_factory=list)  # the answer-containing passage
    context: list[Passage] = field(default_factory=list)  # re-ranked passages it was expanded on
    valid: bool = True
    pruned: bool = False
    restored: bool = False
    expanded: bool = False
    vec: np.ndarray | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "parent": self.parent, "depth": self.depth,
                "question": self.question, "answer": self.answer,
                "passages": [p.id for p in self.evidence],
                "context": [p.id for p in self.context],
                "valid": self.valid, "pruned": self.pruned, "restored": self.restored,
                "expanded": self.expanded}


@dataclass
class _Run:
    """State of one ``forward`` call, kept off the module so concurrent calls cannot mix."""

    pool: list[Passage]
    pool_vecs: np.ndarray
    nodes: list[_Node]
    n_valid: int = 0
    n_duplicates: int = 0
    n_over_limit: int = 0
    lm_calls: int = 0  # clarifications and verifications made so far
    capped: bool = False  # the LM-call cap stopped the tree
    sentence_vecs: dict[str, np.ndarray] = field(default_factory=dict)  # trim_sentences' cache


def contains_answer(answer: str, text: str) -> bool:
    """Does the normalized ``answer`` occur in the normalized ``text`` as whole words?

    "2" must not match "2001" nor "Paris" match "Parisian": the answer-containing passage is
    the node's evidence, and a substring hit picks the wrong one.
    """
    a = normalize_answer(answer)
    return bool(a) and f" {a} " in f" {normalize_answer(text)} "


def _jaccard(a: str, b: str) -> float:
    sa, sb = set(a.split()), set(b.split())
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


def _is_duplicate(pair: Interpretation, others: list[tuple[str, str]]) -> bool:
    """Same normalized DQ, or same normalized answer to a near-identical DQ."""
    q, a = normalize_answer(pair.question), normalize_answer(pair.answer)
    for oq, oa in others:
        if q == oq or (a == oa and _jaccard(q, oq) >= NEAR_IDENTICAL):
            return True
    return False


@dataclass(frozen=True)
class ToCConfig(ProgramConfig):
    """ToC's settings, the single source of their defaults.

    Attributes:
        n_retrieve: pool size (the release's ColBERT share: 100).
        k: passages re-ranked per RAC call and given to the answer (release: 5).
        max_depth, max_nodes, max_failed: the BFS limits (paper: 3, 10, 3).
        min_nodes: pruned nodes restored, nearest the root first, when fewer survive (ours).
        verify: False is the paper's "RAC+TS" ablation: no verification call and no
            deduplication (Table 3's "w/o Pruning"; the release's ``check_unique`` also runs
            only with ``--verify``).
        max_workers: sibling expansions run concurrently in batches of this size.
        verification: ``"paper"`` (default), ``"evidence"`` or ``"strict"`` (see step 5 of
            :class:`TreeOfClarifications`).
        max_lm_calls: cap on LM calls per question, the final answer included (the paper
            stays under 20; the release caps expansions at 15). Default 20.
        trim_sentences: None (default, the paper): prompts show whole passages. N >= 1: each
            passage is shown as its N sentences closest to the prompt's question -- the AQ and
            the node's DQ for a clarification, the AQ and the node's DQ with its answer for a
            verification, the AQ and the kept pairs for the long answer
            (``ambiqa.programs.trim``, a declared deviation for fewer prompt tokens); the tree
            and the output keep whole passages.
    """

    label = "toc: "

    n_retrieve: int = int_field(100)
    k: int = int_field(5)
    max_depth: int = int_field(3)
    max_nodes: int = int_field(10)
    max_failed: int = int_field(3)
    min_nodes: int = int_field(2, minimum=0)
    verify: bool = bool_field(True)
    max_workers: int | None = int_field(None, none_ok=True)
    verification: str = "paper"
    max_lm_calls: int = int_field(20, minimum=2)
    trim_sentences: int | None = trim_field()

    def check(self) -> None:
        if self.min_nodes > self.max_nodes:
            raise ConfigError(f"toc: min_nodes ({self.min_nodes}) exceeds max_nodes "
                              f"({self.max_nodes})")
        if self.verification not in VERIFICATIONS:
            raise ConfigError(f"toc: verification must be one of {', '.join(VERIFICATIONS)}, "
                              f"got {self.verification!r}")


class TreeOfClarifications(AmbiqaProgram):
    """Tree of Clarifications (Kim et al., 2023), in the order :meth:`run` takes the steps:

    1. Retrieve one pool of ``n_retrieve`` passages for the ambiguous question (AQ).
    2. RAC at the root: re-rank the pool against the AQ (cosine), keep the top ``k``, ask for
       DQ/DA pairs grounded in them; each pair becomes a child node.
    3. Breadth-first expansion: each valid node re-ranks the same pool against its own DQ and
       runs RAC again; stop at ``max_nodes`` valid nodes, ``max_failed`` failed expansions in
       a row, the depth limit, or ``max_lm_calls`` LM calls (``stop_reason``).
    4. Deduplication of proposed pairs against every earlier node, pruned ones included
       (with ``verify`` only: the paper's no-pruning ablation deduplicates nothing).
    5. Self-verification of each new node as it is created (the paper's prompt: AQ, the
       answer-containing passage and the answer; ``verification="evidence"`` asks the same
       with a quoted sentence before a yes/no; ``"strict"`` adds the DQ and asks for scope
       and support); pruned nodes are never expanded.
    6. The long answer from the kept nodes and their passages (pruning undone nearest the
       root when fewer than ``min_nodes`` survive); nothing found → no interpretation.

    The faithfulness table (paper / release step → code → test) and the deviations with their
    reasons are in ``docs/methods.md#tree-of-clarifications``.

    Args:
        retriever: the first-stage retriever (the paper merges ColBERT and Bing).
        config: a :class:`ToCConfig` (or a dict of its fields); its fields are described
            there. Keyword ``settings`` override single fields: ``TreeOfClarifications(r,
            max_depth=2)``.
        encoder: the re-ranker's encoder (default all-MiniLM-L6-v2); outputs are normalised,
            so any encoder ranks by cosine.
    """

    name = "toc"
    # minimal dependent LM rounds: root clarification yields no valid pair -> long answer;
    # each tree level adds clarify + verify rounds (calls within a level run in parallel)
    min_lm_rounds = 2

    encoder = SharedEncoder()

    config_class = ToCConfig

    def __init__(self, retriever=None, config: ToCConfig | dict[str, Any] | None = None, *,
                 encoder=None, **settings: Any) -> None:
        super().__init__(retriever)
        self.use_config(resolve_config(ToCConfig, config, settings,
                                       owner="TreeOfClarifications"))
        self.encoder = encoder
        self.clarify = ClarifyStep()
        self.self_verify = dspy.Predict(_VERIFIERS[self.verification])  # checked by ToCConfig
        self.long_answer = LongAnswerStep()

    # ---- the algorithm ----------------------------------------------------------------------
    def run(self, question: str) -> dict[str, Any]:
        pool = self.require_retriever().search(question, self.n_retrieve)
        pool_vecs = (unit_rows(self.encoder.encode([p.render() for p in pool])) if pool
                     else np.zeros((0, 1), dtype=np.float64))
        root = _Node(id=0, parent=None, depth=0, question=question,
                     vec=unit_rows(self.encoder.encode([question])[0]))
        run = _Run(pool=pool, pool_vecs=pool_vecs, nodes=[root])

        stop_reason, discarded = self._explore(run)
        kept = self._select(run)
        extras = {"stop_reason": stop_reason, "n_duplicates": run.n_duplicates,
                  "n_over_limit": run.n_over_limit, "discarded_expansions": discarded,
                  "tree_lm_calls": run.lm_calls}

        if not kept:  # nothing to clarify: a long answer from the root passages, no reading
            passages = root.context
            announce([], passages)
            answer = self.long_answer(question=question, pairs=[], passages=self._shown(
                run, passages, [question]))
            interps = []
            extras["fallback"] = "no_interpretations"
        else:
            passages = self._answer_passages(kept, root)
            interps = [Interpretation(question=n.question, answer=n.answer,
                                      passages=[p.id for p in n.evidence]) for n in kept]
            announce(interps, passages)
            shown = self._shown(run, passages,
                                [question, *(f"{n.question} {n.answer}" for n in kept)])
            answer = self.long_answer(question=question, pairs=interps, passages=shown)
        return {"interpretations": interps, "answer": answer, "passages": passages,
                "tree": [n.to_dict() for n in run.nodes], **extras}

    def _explore(self, run: _Run) -> tuple[str, int]:
        """BFS over the tree; returns (why it stopped, expansions whose results were dropped)."""
        queue: deque[_Node] = deque(run.nodes[:1])
        failed = 0
        depth_limited = False
        workers = self.max_workers or default_workers()
        while queue:
            budget = self._budget(run)
            if budget <= 0:
                return self._capped(run), 0
            depth = queue[0].depth
            batch: list[_Node] = []
            while queue and queue[0].depth == depth and len(batch) < min(workers, budget):
                batch.append(queue.popleft())
            run.lm_calls += len(batch)
            contexts = [self._rerank(run, node.vec) for node in batch]
            jobs = [(node.question, self._shown(run, context,
                                                [run.nodes[0].question, node.question]))
                    for node, context in zip(batch, contexts, strict=True)]
            results = run_parallel(lambda job: self.clarify(question=job[0], passages=job[1]),
                                   jobs, max_workers=workers)
            for i, (node, context, pairs) in enumerate(
                    zip(batch, contexts, results, strict=True)):
                node.context, node.expanded = context, True
                added, limited = self._grow(run, node, pairs, queue)
                depth_limited |= limited
                if run.n_valid >= self.max_nodes:
                    return "max_nodes", len(batch) - i - 1
                if run.capped:
                    return self._capped(run), len(batch) - i - 1
                failed = 0 if added else failed + 1
                if failed >= self.max_failed:
                    return "max_failed", len(batch) - i - 1
        return ("max_depth" if depth_limited else "exhausted"), 0

    def _budget(self, run: _Run) -> int:
        """LM calls the tree may still make (one is kept for the final answer)."""
        return self.max_lm_calls - 1 - run.lm_calls

    def _capped(self, run: _Run) -> str:
        run.capped = True
        record_event("toc", f"stopped: LM call cap reached ({run.lm_calls} tree calls + the "
                            f"answer = max_lm_calls {self.max_lm_calls})")
        return "max_lm_calls"

    def _grow(self, run: _Run, parent: _Node, pairs: list[Interpretation],
              queue: deque[_Node]) -> tuple[int, bool]:
        """Turn one expansion's pairs into child nodes: dedup and verify (both only with
        ``verify``: the paper's "no pruning" has neither), enqueue the valid ones.

        Returns (new valid nodes, whether a valid child was left unexpanded by max_depth).
        Children are verified in chunks no larger than the number of valid nodes still wanted,
        so verification never runs past ``max_nodes`` and no call is wasted.
        """
        question = run.nodes[0].question
        fresh: list[Interpretation] = list(pairs)
        if self.verify:  # deduplication is part of pruning: verify=False keeps every pair
            # earlier nodes, pruned ones included, and earlier pairs of this reply
            seen = [(normalize_answer(n.question), normalize_answer(n.answer))
                    for n in run.nodes[1:]]
            fresh = []
            for pair in pairs:
                if _is_duplicate(pair, seen):
                    run.n_duplicates += 1
                    continue
                seen.append((normalize_answer(pair.question), normalize_answer(pair.answer)))
                fresh.append(pair)

        added, limited, i = 0, False, 0
        while i < len(fresh) and run.n_valid < self.max_nodes:
            size = self.max_nodes - run.n_valid
            if self.verify:
                if self._budget(run) <= 0:
                    run.capped = True  # unverified pairs never become nodes
                    break
                size = min(size, self._budget(run))
                run.lm_calls += min(size, len(fresh) - i)
            chunk = fresh[i:i + size]
            i += len(chunk)
            vecs = unit_rows(self.encoder.encode([p.question for p in chunk]))
            children = []
            for pair, vec in zip(chunk, vecs, strict=True):
                child = _Node(id=len(run.nodes), parent=parent.id, depth=parent.depth + 1,
                              question=pair.question, answer=pair.answer, vec=vec,
                              evidence=self._evidence(run, pair, vec, parent.context))
                run.nodes.append(child)
                children.append(child)
            if self.verify:
                shown = [self._shown(run, c.evidence, [question, f"{c.question} {c.answer}"])
                         for c in children]
                verdicts = run_parallel(lambda job: self._verify_node(question, *job),
                                        list(zip(children, shown, strict=True)),
                                        max_workers=self.max_workers or default_workers())
            else:
                verdicts = [True] * len(children)
            for child, ok in zip(children, verdicts, strict=True):
                child.valid, child.pruned = ok, not ok
                if not ok:
                    continue
                run.n_valid += 1
                added += 1
                if child.depth < self.max_depth:
                    queue.append(child)
                else:
                    limited = True
        run.n_over_limit += len(fresh) - i
        return added, limited

    def _verify_node(self, question: str, node: _Node,
                     shown: list[Passage] | None = None) -> bool:
        """One self-verification call. The paper's prompt sees the AQ, the answer-containing
        passage (as ``shown``, when trimmed) and the answer (not the DQ); the strict one also
        sees the DQ."""
        extra = {"interpretation": node.question} if self.verification == "strict" else {}
        passage = format_passages(node.evidence if shown is None else shown)
        pred = safe_step("self_verify", lambda: self.self_verify(
            question=question, passage=passage, answer=node.answer, **extra), None)
        if pred is None:
            return True  # degraded judge: keep the node rather than prune blindly
        if self.verification != "evidence":
            return bool(pred.valid)
        verdict = parse_verdict(pred.verdict)
        if verdict is None:  # an unreadable verdict abstains: keep the node, as above
            record_event("toc", f"verification abstained: unreadable verdict "
                                f"{str(pred.verdict)[:40]!r}")
            return True
        return verdict

    def _select(self, run: _Run) -> list[_Node]:
        """Valid nodes in BFS order; undo pruning nearest the root first if too few remain."""
        kept = [n for n in run.nodes[1:] if n.valid]
        if len(kept) < self.min_nodes:
            pruned = sorted((n for n in run.nodes[1:] if n.pruned),
                            key=lambda n: (n.depth, n.id))
            for node in pruned[:self.min_nodes - len(kept)]:
                node.pruned, node.restored = False, True
                kept.append(node)
            kept.sort(key=lambda n: n.id)
        return kept

    # ---- passages ---------------------------------------------------------------------------
    def _shown(self, run: _Run, passages: list[Passage], queries: list[str]) -> list[Passage]:
        """``passages`` as a prompt shows them: trimmed to ``trim_sentences`` sentences near
        ``queries`` when set (each sentence encoded once per question), else as they are."""
        return trimmed_for(self, passages, queries, cache=run.sentence_vecs)

    def _rerank(self, run: _Run, vec: np.ndarray) -> list[Passage]:
        """Top ``k`` of the pool by cosine to ``vec`` (stable on ties), scores attached."""
        if not run.pool:
            return []
        scores = run.pool_vecs @ np.asarray(vec)
        order = np.argsort(-scores, kind="stable")[:self.k]
        return [run.pool[j].with_score(float(scores[j])) for j in order]

    def _evidence(self, run: _Run, pair: Interpretation, vec: np.ndarray,
                  context: list[Passage]) -> list[Passage]:
        """The answer-containing passage for a new node, sought only in ``context``, the
        parent's ``k`` re-ranked passages: the cited one when it holds the answer (whole
        words), else the answer holder closest to the DQ, else the cited passage, else the
        closest one (docs/methods.md#tree-of-clarifications: the release looks in every
        passage selected anywhere in the tree)."""
        by_id = {p.id: p for p in context}
        cited = [by_id[pid] for pid in pair.passages if pid in by_id]

        def contains(p: Passage) -> bool:
            return contains_answer(pair.answer, p.render())

        if cited and contains(cited[0]):
            return cited[:1]
        holding = [p for p in context if contains(p)]
        if holding:
            return self._nearest(run, vec, holding)
        if cited:
            return cited[:1]
        return self._nearest(run, vec, context)

    def _nearest(self, run: _Run, vec: np.ndarray, passages: list[Passage]) -> list[Passage]:
        """The passage closest to ``vec`` (pool embeddings reused when available)."""
        if not passages:
            return []
        index = {p.id: j for j, p in enumerate(run.pool)}
        if all(p.id in index for p in passages):
            scores = run.pool_vecs[[index[p.id] for p in passages]] @ vec
        else:
            scores = unit_rows(self.encoder.encode([p.render() for p in passages])) @ vec
        return [passages[int(np.argmax(scores))]]

    def _answer_passages(self, kept: list[_Node], root: _Node) -> list[Passage]:
        """Answer-containing passages of the kept nodes first, then the root's, ``k`` in all."""
        out: list[Passage] = []
        seen: set[str] = set()
        for p in [p for n in kept for p in n.evidence] + list(root.context):
            if p.id not in seen and len(out) < self.k:
                seen.add(p.id)
                out.append(p)
        return out
