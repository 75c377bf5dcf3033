"""Reader training data: SQuAD 2.0-style examples from ASQA and HotpotQA, and their windows.

Split from :mod:`ambiqa.reader_training.train` (which re-exports every name here): this
module decides *what* the reader learns from -- which spans count as answers, which texts are
no-answer examples, which questions are held out -- and holds no torch code, so the data can be
built, counted and tested without a model.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ambiqa.data.corpus import load_corpus
from ambiqa.data.specs import is_training_split, load_dataset
from ambiqa.errors import ConfigError, DataError
from ambiqa.evaluation.extractive import (
    Window,
    locate_answer,
    locate_answer_in_tokens,
    normalized_tokens,
    windows,
)
from ambiqa.reader_training.config import TrainConfig


@dataclass
class ReaderExample:
    """One SQuAD-style example; ``answer_start is None`` marks a no-answer example."""

    qid: str
    question: str
    context: str
    answer: str
    answer_start: int | None
    aliases: list[str]
    source: str = ""  # which training source made it (set by training_examples)


_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+")


def remove_sentence(context: str, start: int, end: int) -> str:
    """``context`` without the sentence(s) holding ``[start, end)`` ("" if nothing is left)."""
    bounds = [0, *(m.end() for m in _SENTENCE_END.finditer(context)), len(context)]
    left = max(b for b in bounds if b <= start)
    right = min(b for b in bounds if b >= end)
    return " ".join((context[:left] + " " + context[right:]).split())


def build_examples(records: Sequence[Any], *, removed_negatives: float = 0.0, seed: int = 0
                   ) -> tuple[list[ReaderExample], dict[str, int]]:
    """Reader examples from ASQA-style records (``qa_pairs``, ``long_answers``) and counts.

    One example per (long answer, disambiguated question). Counts: ``questions`` (records),
    ``long_answers``, ``answerable`` (span found), ``no_answer`` (no alias in the long answer).

    ``removed_negatives`` (a share, 0 = none) adds SQuAD 2.0-style no-answer examples of the
    kind D-F1 meets in system outputs: the long answer with the sentence that held the answer
    deleted (kept only when no alias survives elsewhere), counted as ``no_answer_removed``.
    Human long answers almost always cover every interpretation, so without these the reader
    would hardly ever see a long answer that leaves one out.
    """
    out: list[ReaderExample] = []
    counts = {"questions": 0, "long_answers": 0, "answerable": 0, "no_answer": 0,
              "no_answer_removed": 0}
    rng = random.Random(seed)
    for rec in records:
        get = rec.get if isinstance(rec, dict) else (lambda k, d=None, r=rec: getattr(r, k, d))
        pairs = get("qa_pairs") or []
        contexts = [str(c) for c in (get("long_answers") or []) if str(c).strip()]
        counts["questions"] += 1
        counts["long_answers"] += len(contexts)
        rid = str(get("id") or counts["questions"])
        for a, context in enumerate(contexts):
            for p, pair in enumerate(pairs):
                question = str(pair.get("question") or "").strip()
                aliases = [str(x) for x in (pair.get("short_answers") or []) if str(x).strip()]
                if not question or not aliases:
                    continue
                span = locate_answer(context, aliases)
                if span is None:
                    counts["no_answer"] += 1
                    out.append(ReaderExample(f"{rid}/{a}/{p}", question, context, "", None,
                                             aliases))
                else:
                    counts["answerable"] += 1
                    out.append(ReaderExample(f"{rid}/{a}/{p}", question, context,
                                             context[span[0]:span[1]], span[0], aliases))
                    if removed_negatives > 0 and rng.random() < removed_negatives:
                        rest = remove_sentence(context, *span)
                        if rest and locate_answer(rest, aliases) is None:
                            counts["no_answer_removed"] += 1
                            out.append(ReaderExample(f"{rid}/{a}/{p}/removed", question, rest,
                                                     "", None, aliases))
    return out, counts


def _field(rec: Any, key: str, default: Any = None) -> Any:
    return rec.get(key, default) if isinstance(rec, dict) else getattr(rec, key, default)


def build_passage_examples(records: Sequence[Any], *, negatives_per_pair: int = 1,
                           seed: int = 0) -> tuple[list[ReaderExample], dict[str, int]]:
    """Reader examples from ASQA's grounding passages (``gold_passages``: title, text).

    For each disambiguated question, every passage of its ASQA question that contains one of
    the pair's short answers (alias match, as for long answers) is an answerable example; of
    the passages of the same question that contain none of the pair's answers, up to
    ``negatives_per_pair`` (seeded choice) become no-answer examples. These negatives share the
    question's topic, so they teach the reader to abstain on a relevant text that does not
    answer *this* interpretation -- the case D-F1 meets in system long answers.
    Counts: ``answerable``, ``no_answer``, ``pairs`` (pairs with at least one example).
    """
    out: list[ReaderExample] = []
    counts = {"questions": 0, "passages": 0, "pairs": 0, "answerable": 0, "no_answer": 0}
    rng = random.Random(seed)
    for n, rec in enumerate(records):
        rid = str(_field(rec, "id") or n)
        passages = [str(p.get("text") or "") for p in (_field(rec, "gold_passages") or [])
                    if isinstance(p, dict) and str(p.get("text") or "").strip()]
        counts["questions"] += 1
        counts["passages"] += len(passages)
        for k, pair in enumerate(_field(rec, "qa_pairs") or []):
            question = str(pair.get("question") or "").strip()
            aliases = [str(x) for x in (pair.get("short_answers") or []) if str(x).strip()]
            if not question or not aliases:
                continue
            misses = []
            made = 0
            for j, text in enumerate(passages):
                span = locate_answer(text, aliases)
                if span is None:
                    misses.append((j, text))
                    continue
                made += 1
                counts["answerable"] += 1
                out.append(ReaderExample(f"{rid}/passage{j}/{k}", question, text,
                                         text[span[0]:span[1]], span[0], aliases))
            for j, text in rng.sample(misses, min(negatives_per_pair, len(misses))):
                made += 1
                counts["no_answer"] += 1
                out.append(ReaderExample(f"{rid}/passage{j}/{k}/none", question, text, "",
                                         None, aliases))
            counts["pairs"] += made > 0
    return out, counts


def build_hotpot_examples(records: Sequence[Any], *, seed: int = 0
                          ) -> tuple[list[ReaderExample], dict[str, int]]:
    """Reader examples from HotpotQA records (``contexts``: title, text, is_supporting).

    Each supporting paragraph that contains the answer is an answerable example; one seeded
    distractor paragraph (not supporting, no answer in it) per question is a no-answer example.
    Yes/no questions are skipped: their answer is not a span. Counts: ``answerable``,
    ``no_answer``, ``skipped_yes_no``.
    """
    out: list[ReaderExample] = []
    counts = {"questions": 0, "answerable": 0, "no_answer": 0, "skipped_yes_no": 0}
    rng = random.Random(seed)
    for n, rec in enumerate(records):
        rid = str(_field(rec, "id") or n)
        question = str(_field(rec, "question") or "").strip()
        answer = str(_field(rec, "answer") or "").strip()
        counts["questions"] += 1
        if answer.lower() in {"yes", "no"}:
            counts["skipped_yes_no"] += 1
            continue
        if not question or not answer:
            continue
        paras = [p for p in (_field(rec, "contexts") or []) if isinstance(p, dict)
                 and str(p.get("text") or "").strip()]
        distractors = []
        for j, para in enumerate(paras):
            text = str(para["text"])
            span = locate_answer(text, [answer])
            if para.get("is_supporting") and span is not None:
                counts["answerable"] += 1
                out.append(ReaderExample(f"{rid}/{j}", question, text,
                                         text[span[0]:span[1]], span[0], [answer]))
            elif not para.get("is_supporting") and span is None:
                distractors.append((j, text))
        if distractors:
            j, text = rng.choice(distractors)
            counts["no_answer"] += 1
            out.append(ReaderExample(f"{rid}/{j}/none", question, text, "", None, [answer]))
    return out, counts


def training_examples(cfg: TrainConfig, limit: int | None = None
                      ) -> tuple[list[ReaderExample], dict[str, Any]]:
    """All training examples ``cfg`` asks for, and counts per source.

    Sources: ``long_answers`` (always, from ``cfg.train``; repeated ``cfg.long_answer_repeat``
    times, the in-domain text D-F1 reads), ``asqa_passages`` (if ``cfg.asqa_passages``: the
    grounding passages of the same training questions), ``hotpotqa`` (if ``cfg.hotpotqa``
    names a HotpotQA training split) and ``ambignq`` (if ``cfg.ambignq`` names an AmbigNQ
    training split: distant supervision over ``cfg.corpus``). The last ``cfg.holdout``
    questions of ``cfg.train`` are left out of every source (AmbigNQ records sharing one of
    their questions too): they are the training-split validation set
    (:func:`holdout_examples`). Every split must be a training split; evaluation data is
    refused, and any record sharing a question with an evaluation split
    (:data:`GUARDED_EVAL_SPECS`) is dropped and counted (``excluded_eval_overlap``).
    """
    for spec in (cfg.train, cfg.hotpotqa, cfg.ambignq):
        if spec and not is_training_split(spec):
            raise ConfigError(f"refusing to train the reader on evaluation data '{spec}'",
                              hint="use training splits, e.g. asqa:train, hotpotqa:train, "
                                   "ambignq:train_light")
    banned = evaluation_questions()
    all_records = list(load_dataset(cfg.train))
    records, dropped = drop_eval_overlap(all_records, banned)
    if limit:
        records = records[:limit]
    held_keys: set[str] = set()
    if cfg.holdout:
        held = records[-cfg.holdout:] if cfg.holdout < len(records) else records
        for rec in held:
            held_keys |= record_questions(rec)
        records = records[:-cfg.holdout] if cfg.holdout < len(records) else []
    examples, counts = build_examples(records, removed_negatives=cfg.removed_negatives,
                                      seed=cfg.seed)
    long_source = dict(counts)
    _tag(examples, "long_answers")
    examples = examples * max(1, cfg.long_answer_repeat)
    per_source: dict[str, Any] = {**counts, "long_answers_source": long_source,
                                  "long_answer_repeat": max(1, cfg.long_answer_repeat),
                                  "excluded_eval_overlap": {cfg.train: dropped}}
    if cfg.asqa_passages:
        extra, c = build_passage_examples(records, seed=cfg.seed)
        examples += _tag(extra, "asqa_passages")
        per_source["asqa_passages"] = c
    if cfg.hotpotqa:
        hot, dropped = drop_eval_overlap(list(load_dataset(cfg.hotpotqa)), banned)
        per_source["excluded_eval_overlap"][cfg.hotpotqa] = dropped
        if limit:
            hot = hot[:limit]
        extra, c = build_hotpot_examples(hot, seed=cfg.seed)
        examples += _tag(extra, "hotpotqa")
        per_source["hotpotqa"] = c
    if cfg.ambignq:
        amb, dropped = drop_eval_overlap(list(load_dataset(cfg.ambignq)), banned | held_keys)
        per_source["excluded_eval_overlap"][cfg.ambignq] = dropped
        if limit:
            amb = amb[:limit]
        if not cfg.corpus:
            raise ConfigError("--ambignq needs a passage corpus (--corpus FILE.jsonl)")
        index = PassageIndex(load_corpus(cfg.corpus))
        extra, c = build_ambignq_examples(amb, index, seed=cfg.seed)
        examples += _tag(extra, "ambignq")
        per_source["ambignq"] = c
        if cfg.ambignq_lists:
            extra, c = build_ambignq_list_examples(amb, removed_negatives=cfg.removed_negatives,
                                                   seed=cfg.seed)
            examples += _tag(extra, "ambignq_lists")
            per_source["ambignq_lists"] = c
    assert_no_eval_questions(examples, banned | held_keys)
    return examples, per_source


def _tag(examples: list[ReaderExample], source: str) -> list[ReaderExample]:
    for e in examples:
        e.source = source
    return examples


def holdout_examples(cfg: TrainConfig) -> list[ReaderExample]:
    """The training-split validation examples: the grounding-passage examples of the last
    ``cfg.holdout`` questions of ``cfg.train`` (never trained on by a reader that set
    ``holdout``). Used to choose the default reader without touching evaluation data."""
    if not cfg.holdout:
        return []
    records = list(load_dataset(cfg.train))[-cfg.holdout:]
    return build_passage_examples(records, seed=cfg.seed + 1)[0]


def holdout_long_answer_examples(cfg: TrainConfig) -> list[ReaderExample]:
    """The long-answer examples of the same held-out questions (what D-F1 reads), built as
    for training, answer-sentence-removed negatives included. A reader trained without
    ``holdout`` (v1) has seen these questions, which favours it in any comparison."""
    if not cfg.holdout:
        return []
    records = list(load_dataset(cfg.train))[-cfg.holdout:]
    return build_examples(records, removed_negatives=cfg.removed_negatives,
                          seed=cfg.seed + 1)[0]


def featurize(tokenizer: Any, examples: Sequence[ReaderExample], *, max_length: int,
              doc_stride: int, max_question_tokens: int) -> list[Window]:
    """Training windows with ``meta['start'/'end']`` labels (0 = the null span at [CLS]).

    A window that does not contain the whole answer span is labelled null, as in the SQuAD 2.0
    recipe, so long contexts teach the reader to abstain on windows that miss the answer.
    """
    feats: list[Window] = []
    for ex in examples:
        for w in windows(tokenizer, ex.question, ex.context, max_length=max_length,
                         doc_stride=doc_stride, max_question_tokens=max_question_tokens):
            start = end = 0
            if ex.answer_start is not None:
                a0, a1 = ex.answer_start, ex.answer_start + len(ex.answer)
                s_tok = e_tok = None
                for i in range(w.context_start, w.context_end):
                    off = w.offsets[i]
                    assert off is not None
                    if s_tok is None and off[0] <= a0 < off[1]:
                        s_tok = i
                    if off[0] < a1 <= off[1]:
                        e_tok = i
                if s_tok is not None and e_tok is not None and e_tok >= s_tok:
                    start, end = s_tok, e_tok
            w.meta = {"start": start, "end": end, "qid": ex.qid}
            feats.append(w)
    return feats


# --------------------------------------------------------------------------------------------
# evaluation-question guard
# --------------------------------------------------------------------------------------------

#: the evaluation splits whose questions may never reach a reader's training data
GUARDED_EVAL_SPECS: tuple[str, ...] = ("asqa:dev", "ambignq:dev_light", "ambignq:dev",
                                       "hotpotqa:dev")


def question_key(text: str) -> str:
    """A question as compared for leaks: lowercase, punctuation dropped, spaces collapsed."""
    return " ".join("".join(ch if ch.isalnum() else " " for ch in str(text).lower()).split())


def record_questions(rec: Any) -> set[str]:
    """Every question a record shows a reader (ambiguous and disambiguated), as keys."""
    keys = {question_key(_field(rec, "question") or "")}
    for pair in _field(rec, "qa_pairs") or []:
        keys.add(question_key(pair.get("question") or ""))
    keys.discard("")
    return keys


def evaluation_questions(specs: Sequence[str] = GUARDED_EVAL_SPECS) -> set[str]:
    """The question keys of every evaluation split in ``specs`` that exists on this machine.

    A missing file is skipped (a user may lack AmbigNQ dev); anything else propagates. Used
    to drop any training record that shares a question with evaluation data: ASQA dev is built
    from AmbigNQ, so AmbigNQ's *training* file could in principle hold a dev question.
    """
    keys: set[str] = set()
    for spec in specs:
        try:
            records = load_dataset(spec)
        except (DataError, FileNotFoundError):
            continue
        for rec in records:
            keys |= record_questions(rec)
    return keys


def drop_eval_overlap(records: Sequence[Any], banned: set[str]) -> tuple[list[Any], int]:
    """``records`` without those sharing any question with ``banned``; and how many were
    dropped."""
    kept = [r for r in records if not (record_questions(r) & banned)]
    return kept, len(records) - len(kept)


def assert_no_eval_questions(examples: Sequence[ReaderExample], banned: set[str]) -> None:
    """Refuse training data that holds an evaluation question (the last line of defence)."""
    leaked = [e.qid for e in examples if question_key(e.question) in banned]
    if leaked:
        raise ConfigError(f"{len(leaked)} reader training examples ask an evaluation question "
                          f"(first: {leaked[0]})",
                          hint="train on training splits only; the evaluation questions are "
                               "those of " + ", ".join(GUARDED_EVAL_SPECS))


# --------------------------------------------------------------------------------------------
# distant supervision: AmbigNQ training questions over corpus passages
# --------------------------------------------------------------------------------------------

_STOP = frozenset("""a an the of in on at to for from by with and or is are was were be been
who what when where which why how whom whose did do does has have had will would can could
that this these those it its as into than then there their they he she his her him i you we
first last new name named called""".split())


class PassageIndex:
    """A small inverted index over corpus passages for distant supervision.

    Holds each passage's SQuAD-normalised tokens once (span finding then costs no
    re-tokenising) and an IDF-weighted word index, so a question's most word-sharing passages
    are found without scanning the corpus.
    """

    def __init__(self, passages: Sequence[Any]) -> None:
        import math
        from collections import defaultdict

        self.texts: list[str] = []
        self.toks: list[list[tuple[str, int, int]]] = []
        postings: dict[str, set[int]] = defaultdict(set)
        for p in passages:
            text = str(_field(p, "text") or "")
            title = str(_field(p, "title") or "")
            i = len(self.texts)
            self.texts.append(text)
            toks = normalized_tokens(text)
            self.toks.append(toks)
            for w in {t[0] for t in toks} | {t[0] for t in normalized_tokens(title)}:
                if w not in _STOP:
                    postings[w].add(i)
        n = max(1, len(self.texts))
        self.postings = dict(postings)
        self.idf = {w: math.log(n / len(ids)) for w, ids in self.postings.items()}

    def search(self, question: str, k: int = 20, min_share: float = 0.5
               ) -> list[tuple[int, float]]:
        """Passages sharing at least ``min_share`` of the question's IDF weight, best first."""
        from collections import Counter

        words = {t[0] for t in normalized_tokens(question)} - _STOP
        words = {w for w in words if w in self.postings}
        total = sum(self.idf[w] for w in words)
        if total <= 0:
            return []
        score: Counter[int] = Counter()
        for w in words:
            if self.idf[w] < 0.5:  # in most passages: says nothing about relevance
                continue
            for i in self.postings[w]:
                score[i] += self.idf[w]
        return [(i, s / total) for i, s in score.most_common(k) if s / total >= min_share]

    def locate(self, i: int, aliases: Sequence[str]) -> tuple[int, int] | None:
        """:func:`locate_answer` on passage ``i`` with its cached tokens."""
        return locate_answer_in_tokens(self.texts[i], self.toks[i], aliases)


def build_ambignq_examples(records: Sequence[Any], index: PassageIndex, *,
                           positives_per_pair: int = 1, negatives_per_pair: int = 1,
                           sibling_contexts: bool = True, k: int = 20,
                           min_share: float = 0.5, seed: int = 0
                           ) -> tuple[list[ReaderExample], dict[str, int]]:
    """Distantly supervised examples: AmbigNQ *training* disambiguated questions over corpus
    passages that contain their answers.

    For each disambiguated question (``qa_pairs``), the corpus passages sharing most of its
    IDF-weighted words (:meth:`PassageIndex.search`) are read: up to ``positives_per_pair``
    of them that contain one of the pair's short answers are answerable examples; the best
    word-sharing passage that contains none is a no-answer example (often it answers a sibling
    interpretation -- the case D-F1 must score 0), kept only for a pair that found an
    answer-bearing passage (otherwise the corpus hardly covers the topic). With
    ``sibling_contexts``, a pair whose sibling interpretation also found a passage gets one
    more example: both passages joined
    in a seeded order, labelled with *this* pair's answer -- a context stating several
    interpretations, like an ASQA long answer. Counts: ``pairs``, ``answerable``,
    ``no_answer``, ``sibling``, ``no_passage`` (pairs with no answer-bearing passage).
    """
    out: list[ReaderExample] = []
    counts = {"questions": 0, "pairs": 0, "answerable": 0, "no_answer": 0, "sibling": 0,
              "no_passage": 0}
    rng = random.Random(seed)
    for n, rec in enumerate(records):
        rid = str(_field(rec, "id") or n)
        counts["questions"] += 1
        found: list[tuple[int, str, list[str], int]] = []  # (pair, question, aliases, passage)
        for k_pair, pair in enumerate(_field(rec, "qa_pairs") or []):
            question = str(pair.get("question") or "").strip()
            aliases = [str(x) for x in (pair.get("short_answers") or []) if str(x).strip()]
            if not question or not aliases:
                continue
            counts["pairs"] += 1
            pos: list[ReaderExample] = []
            neg: list[ReaderExample] = []
            for i, _share in index.search(question, k=k, min_share=min_share):
                span = index.locate(i, aliases)
                text = index.texts[i]
                if span is not None and len(pos) < positives_per_pair:
                    pos.append(ReaderExample(f"ambignq:{rid}/{k_pair}/p{i}", question, text,
                                             text[span[0]:span[1]], span[0], aliases))
                    found.append((k_pair, question, aliases, i))
                elif span is None and len(neg) < negatives_per_pair:
                    neg.append(ReaderExample(f"ambignq:{rid}/{k_pair}/n{i}", question, text,
                                             "", None, aliases))
                if len(pos) >= positives_per_pair and len(neg) >= negatives_per_pair:
                    break
            if not pos:  # no passage answers it: its negatives would be off-topic noise
                counts["no_passage"] += 1
                continue
            counts["answerable"] += len(pos)
            counts["no_answer"] += len(neg)
            out += pos + neg
        if not sibling_contexts:
            continue
        for k_pair, question, aliases, i in found:
            others = [j for kk, _q, _a, j in found if kk != k_pair and j != i]
            if not others:
                continue
            j = rng.choice(others)
            parts = [index.texts[i], index.texts[j]]
            rng.shuffle(parts)
            context = " ".join(parts)
            span = locate_answer(context, aliases)
            if span is None:
                continue
            counts["sibling"] += 1
            out.append(ReaderExample(f"ambignq:{rid}/{k_pair}/s{i}-{j}", question, context,
                                     context[span[0]:span[1]], span[0], aliases))
    return out, counts


_WH = re.compile(r"^\s*(who|whom|whose|what|which|when|where|why|how( many| much| long| old)?)"
                 r"(\s+(is|are|was|were|did|does|do|has|have|had))?\s+", re.IGNORECASE)


def statement_of(question: str) -> str:
    """A disambiguated question turned into the stem of a statement ("When did X air as a
    show?" -> "X air as a show"), so a list of them reads like an answer, not a question
    list the reader could match by copying."""
    stem = _WH.sub("", str(question).strip()).rstrip(" ?")
    return stem[:1].upper() + stem[1:] if stem else stem


def build_ambignq_list_examples(records: Sequence[Any], *, removed_negatives: float = 0.33,
                                seed: int = 0) -> tuple[list[ReaderExample], dict[str, int]]:
    """Long-answer-like contexts from AmbigNQ *training* questions with several
    interpretations: one sentence per disambiguated question (its statement stem, then its
    first short answer), in a seeded order, e.g. "The Simpsons first air on television as an
    animated short on the Tracey Ullman Show: April 19, 1987. ...". Every pair is asked
    against the list (the reader must pick *its* interpretation among siblings that look
    alike -- what D-F1 asks of an ASQA long answer); with ``removed_negatives`` a share of
    pairs is also asked against the list without its sentence (no-answer, kept only when no
    alias survives). Counts: ``questions`` (with 2+ pairs), ``answerable``, ``no_answer``.
    """
    out: list[ReaderExample] = []
    counts = {"questions": 0, "answerable": 0, "no_answer": 0}
    rng = random.Random(seed)
    for n, rec in enumerate(records):
        rid = str(_field(rec, "id") or n)
        pairs = []
        for pair in _field(rec, "qa_pairs") or []:
            question = str(pair.get("question") or "").strip()
            aliases = [str(x) for x in (pair.get("short_answers") or []) if str(x).strip()]
            if question and aliases:
                pairs.append((question, aliases))
        if len(pairs) < 2:
            continue
        counts["questions"] += 1
        order = list(range(len(pairs)))
        rng.shuffle(order)
        sentences = {k: f"{statement_of(pairs[k][0])}: {pairs[k][1][0]}." for k in order}
        context = " ".join(sentences[k] for k in order)
        for k, (question, aliases) in enumerate(pairs):
            span = locate_answer(context, aliases)
            if span is None:
                continue
            counts["answerable"] += 1
            out.append(ReaderExample(f"ambignq-list:{rid}/{k}", question, context,
                                     context[span[0]:span[1]], span[0], aliases))
            if removed_negatives > 0 and rng.random() < removed_negatives:
                rest = " ".join(sentences[j] for j in order if j != k)
                if rest and locate_answer(rest, aliases) is None:
                    counts["no_answer"] += 1
                    out.append(ReaderExample(f"ambignq-list:{rid}/{k}/removed", question,
                                             rest, "", None, aliases))
    return out, counts
