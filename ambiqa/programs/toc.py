"""Tree of Clarifications (ToC; Kim et al., EMNLP 2023) as an ambiqa program.

Recursive retrieval-augmented clarification in a BFS tree, pruned by self-verification, then
one long answer over the kept nodes. :class:`TreeOfClarifications` documents the paper's steps
and every deviation.
"""

from __future__ import annotations

import re
import string
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import dspy
import numpy as np

from ambiqa.errors import ConfigError
from ambiqa.parallel import default_workers, run_parallel
from ambiqa.programs.base import AmbiqaProgram, format_passages, safe_step
from ambiqa.programs.steps import ClarifyStep, LongAnswerStep
from ambiqa.signatures.verification import SelfVerify
from ambiqa.types import Interpretation, Passage

#: token Jaccard above which two DQs with the same answer count as one node
NEAR_IDENTICAL = 0.8


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


def _normalize(text: str) -> str:
    """SQuAD-style normalization: lowercase, no punctuation, no articles, single spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in string.punctuation)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _jaccard(a: str, b: str) -> float:
    sa, sb = set(a.split()), set(b.split())
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


def _is_duplicate(pair: Interpretation, others: list[tuple[str, str]]) -> bool:
    """Same normalized DQ, or same normalized answer to a near-identical DQ."""
    q, a = _normalize(pair.question), _normalize(pair.answer)
    for oq, oa in others:
        if q == oq or (a == oa and _jaccard(q, oq) >= NEAR_IDENTICAL):
            return True
    return False


class TreeOfClarifications(AmbiqaProgram):
    """Tree of Clarifications. The paper's steps, in the order :meth:`run` takes them:

    1. **Retrieve** one pool of passages for the ambiguous question (AQ) (§3.1; the paper
       merges ColBERT and Bing results into a pool of 200+ passages).
    2. **Retrieval-augmented clarification (RAC)** at the root: re-rank the pool against the
       AQ with a SentenceBERT model, keep the top ``k``, and ask the LM for disambiguated
       questions (DQs) with their answers grounded in those passages (§3.1). Each pair becomes
       a child node.
    3. **Tree structure** (§3.2): expand nodes breadth-first. Expanding a node re-ranks the
       *same* pool against the node's own DQ and runs RAC on it; its new pairs become children
       one level deeper. The root is depth 0, so DQ nodes live at depths 1..``max_depth`` and
       nodes at ``max_depth`` are not expanded (three levels of DQs by default, as in the
       released code). Exploration ends at ``max_nodes`` valid nodes, when the queue of valid
       nodes shallower than ``max_depth`` runs out, or after ``max_failed`` expansions in a
       row that fail -- "failed" as in the paper: the expansion yields no new valid node (§5,
       "Computational Complexity"). ``stop_reason`` says which.
    4. **Deduplication** (Table 3): a proposed pair that repeats an existing node is dropped
       before it becomes a node. Rule chosen here: same normalized DQ (lowercase, punctuation
       and articles removed), or same normalized answer to a near-identical DQ (token Jaccard
       >= 0.8). Compared with every earlier node, kept or pruned, but not with the root (a
       clarification may return the AQ itself with its answer when it is not ambiguous; that
       is a real reading).
    5. **Pruning with self-verification** (§3.2): every new node gets exactly one
       ``SelfVerify`` call -- AQ, the node's DQ and answer, and its answer-containing passage
       -- *as it is created*, before it counts toward ``max_nodes`` or enters the BFS queue.
       The paper verifies during construction (so does the released code): its stopping rule
       counts *valid* nodes, and a pruned DQ asks about a different fact, so clarifying it
       further would only drift further. Pruned nodes stay in the tree (``pruned: true``) but
       are never expanded. ``verify=False`` is the paper's "RAC+TS" ablation: no verification
       call, every node counts as valid.
    6. **Answer generation** (§3.2): the kept nodes (valid ones, in BFS order) and their
       passages go to the long-answer writer. If fewer than ``min_nodes`` survive, pruning is
       undone from the nodes closest to the root, in BFS order. Passages containing the kept
       answers come first, topped up with the root's re-ranked passages, ``k`` in all.

    Deviations, and why:

    * One retriever (ColBERT or whatever the caller passes), no web search: nothing outside
      the machine can be reached. The default pool is ``n_retrieve=100``, the ColBERT share in
      the authors' released configuration (``k=5`` re-ranked passages, 10 nodes, depth 3 and
      3 failed expansions come from there and the paper too).
    * Re-ranking uses the shared bi-encoder (all-MiniLM-L6-v2, cosine) rather than an
      MS-MARCO SentenceBERT cross-encoder: it is the SentenceBERT model installable here.
    * No few-shot exemplars picked per question by nearest neighbour: demos come from the DSPy
      optimizer (compiled programs), the declarative counterpart of the paper's prompting.
    * No restarts: the released code re-runs expansions with sampling (temperature 0.7) when
      the BFS queue empties; with greedy decoding a re-run repeats itself, so an empty queue
      ends the search.
    * The evidence for verification is the passage the clarification cited when it contains
      the answer, else the answer-containing passage (among those the clarification read)
      closest to the DQ, else the cited or closest passage. The paper only asks for "the
      answer-containing passage".
    * ``min_nodes`` (default 2) is our number: the paper gives none.
    * Nothing at all found (the root clarification yields no pair, or every node was pruned
      and ``min_nodes`` is 0): the AQ is treated as unambiguous (§5, "Ambiguity Detection")
      and answered from the root's passages as a single interpretation whose answer is that
      text (``fallback: "no_interpretations"``).
    * Sibling expansions at one BFS level run concurrently in batches of ``max_workers``;
      results are consumed in BFS order, so the tree is exactly the sequential one. If a
      stopping rule fires mid-batch, the rest of the batch is discarded (counted in
      ``discarded_expansions``): the price of concurrency. ``max_workers=1`` wastes nothing.
    * An unparseable verification keeps the node (recorded as a degraded step): a broken
      judge then behaves like ``verify=False`` rather than pruning everything.

    Extras in the Prediction: ``tree`` (every node: id, parent, depth, question, answer,
    passages = evidence ids, context = ids it was expanded on, valid, pruned, restored,
    expanded), ``stop_reason``, ``n_duplicates``, ``n_over_limit`` (fresh pairs never made
    nodes because ``max_nodes`` was reached), ``discarded_expansions``.
    """

    name = "toc"
    # minimal dependent LM rounds: root clarification yields no valid pair -> long answer;
    # each tree level adds clarify + verify rounds (calls within a level run in parallel)
    min_lm_rounds = 2

    def __init__(self, retriever=None, *, n_retrieve: int = 100, k: int = 5,
                 max_depth: int = 3, max_nodes: int = 10, max_failed: int = 3,
                 min_nodes: int = 2, verify: bool = True, max_workers: int | None = None,
                 encoder=None) -> None:
        super().__init__(retriever)
        for key, value, low in (("n_retrieve", n_retrieve, 1), ("k", k, 1),
                                ("max_depth", max_depth, 1), ("max_nodes", max_nodes, 1),
                                ("max_failed", max_failed, 1), ("min_nodes", min_nodes, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"toc: {key} must be an integer >= {low}, got {value!r}")
        if max_workers is not None and (not isinstance(max_workers, int) or max_workers < 1):
            raise ConfigError(f"toc: max_workers must be a positive integer or None, "
                              f"got {max_workers!r}")
        if min_nodes > max_nodes:
            raise ConfigError(f"toc: min_nodes ({min_nodes}) exceeds max_nodes ({max_nodes})")
        self.n_retrieve, self.k = n_retrieve, k
        self.max_depth, self.max_nodes, self.max_failed = max_depth, max_nodes, max_failed
        self.min_nodes, self.verify, self.max_workers = min_nodes, bool(verify), max_workers
        self._encoder = encoder  # loaded on first use: building a program should stay cheap
        self.clarify = ClarifyStep()
        self.self_verify = dspy.Predict(SelfVerify)
        self.long_answer = LongAnswerStep()

    def config(self) -> dict[str, Any]:
        return {"n_retrieve": self.n_retrieve, "k": self.k, "max_depth": self.max_depth,
                "max_nodes": self.max_nodes, "max_failed": self.max_failed,
                "min_nodes": self.min_nodes, "verify": self.verify,
                "max_workers": self.max_workers}

    @property
    def encoder(self):
        if self._encoder is None:
            from ambiqa.retrieval.encoder import get_encoder

            self._encoder = get_encoder()
        return self._encoder

    # ---- the algorithm ----------------------------------------------------------------------
    def run(self, question: str) -> dict[str, Any]:
        pool = self.require_retriever().search(question, self.n_retrieve)
        pool_vecs = (self.encoder.encode([p.render() for p in pool]) if pool
                     else np.zeros((0, 1), dtype=np.float32))
        root = _Node(id=0, parent=None, depth=0, question=question,
                     vec=self.encoder.encode([question])[0])
        run = _Run(pool=pool, pool_vecs=pool_vecs, nodes=[root])

        stop_reason, discarded = self._explore(run)
        kept = self._select(run)
        extras = {"stop_reason": stop_reason, "n_duplicates": run.n_duplicates,
                  "n_over_limit": run.n_over_limit, "discarded_expansions": discarded}

        if not kept:  # nothing to clarify: answer the AQ as one reading from the root passages
            passages = root.context
            answer = self.long_answer(question=question, pairs=[], passages=passages)
            interps = [Interpretation(question=question, answer=answer,
                                      passages=[p.id for p in passages])]
            extras["fallback"] = "no_interpretations"
        else:
            passages = self._answer_passages(kept, root)
            interps = [Interpretation(question=n.question, answer=n.answer,
                                      passages=[p.id for p in n.evidence]) for n in kept]
            answer = self.long_answer(question=question, pairs=interps, passages=passages)
        return {"interpretations": interps, "answer": answer, "passages": passages,
                "tree": [n.to_dict() for n in run.nodes], **extras}

    def _explore(self, run: _Run) -> tuple[str, int]:
        """BFS over the tree; returns (why it stopped, expansions whose results were dropped)."""
        queue: deque[_Node] = deque(run.nodes[:1])
        failed = 0
        depth_limited = False
        workers = self.max_workers or default_workers()
        while queue:
            depth = queue[0].depth
            batch: list[_Node] = []
            while queue and queue[0].depth == depth and len(batch) < workers:
                batch.append(queue.popleft())
            contexts = [self._rerank(run, node.vec) for node in batch]
            jobs = [(node.question, context) for node, context in zip(batch, contexts,
                                                                      strict=True)]
            results = run_parallel(lambda job: self.clarify(question=job[0], passages=job[1]),
                                   jobs, max_workers=workers)
            for i, (node, context, pairs) in enumerate(
                    zip(batch, contexts, results, strict=True)):
                node.context, node.expanded = context, True
                added, limited = self._grow(run, node, pairs, queue)
                depth_limited |= limited
                if run.n_valid >= self.max_nodes:
                    return "max_nodes", len(batch) - i - 1
                failed = 0 if added else failed + 1
                if failed >= self.max_failed:
                    return "max_failed", len(batch) - i - 1
        return ("max_depth" if depth_limited else "exhausted"), 0

    def _grow(self, run: _Run, parent: _Node, pairs: list[Interpretation],
              queue: deque[_Node]) -> tuple[int, bool]:
        """Turn one expansion's pairs into child nodes: dedup, verify, enqueue the valid ones.

        Returns (new valid nodes, whether a valid child was left unexpanded by max_depth).
        Children are verified in chunks no larger than the number of valid nodes still wanted,
        so verification never runs past ``max_nodes`` and no call is wasted.
        """
        question = run.nodes[0].question
        seen = [(_normalize(n.question), _normalize(n.answer)) for n in run.nodes[1:]]
        fresh: list[Interpretation] = []
        for pair in pairs:
            if _is_duplicate(pair, seen):
                run.n_duplicates += 1
                continue
            seen.append((_normalize(pair.question), _normalize(pair.answer)))
            fresh.append(pair)

        added, limited, i = 0, False, 0
        while i < len(fresh) and run.n_valid < self.max_nodes:
            chunk = fresh[i:i + self.max_nodes - run.n_valid]
            i += len(chunk)
            vecs = self.encoder.encode([p.question for p in chunk])
            children = []
            for pair, vec in zip(chunk, vecs, strict=True):
                child = _Node(id=len(run.nodes), parent=parent.id, depth=parent.depth + 1,
                              question=pair.question, answer=pair.answer, vec=vec,
                              evidence=self._evidence(run, pair, vec, parent.context))
                run.nodes.append(child)
                children.append(child)
            verdicts = (run_parallel(lambda n: self._verify_node(question, n), children,
                                     max_workers=self.max_workers or default_workers())
                        if self.verify else [True] * len(children))
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

    def _verify_node(self, question: str, node: _Node) -> bool:
        pred = safe_step("self_verify", lambda: self.self_verify(
            question=question, interpretation=node.question,
            answer=node.answer, passage=format_passages(node.evidence)), None)
        if pred is None:
            return True  # degraded judge: keep the node rather than prune blindly
        return bool(pred.valid)

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
    def _rerank(self, run: _Run, vec: np.ndarray) -> list[Passage]:
        """Top ``k`` of the pool by cosine to ``vec`` (stable on ties), scores attached."""
        if not run.pool:
            return []
        scores = run.pool_vecs @ np.asarray(vec)
        order = np.argsort(-scores, kind="stable")[:self.k]
        return [run.pool[j].with_score(float(scores[j])) for j in order]

    def _evidence(self, run: _Run, pair: Interpretation, vec: np.ndarray,
                  context: list[Passage]) -> list[Passage]:
        """The answer-containing passage for a new node (see the module docstring)."""
        by_id = {p.id: p for p in context}
        cited = [by_id[pid] for pid in pair.passages if pid in by_id]
        answer = _normalize(pair.answer)

        def contains(p: Passage) -> bool:
            return bool(answer) and answer in _normalize(p.render())

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
            scores = self.encoder.encode([p.render() for p in passages]) @ vec
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
