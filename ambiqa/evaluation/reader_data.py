"""Reader training data: SQuAD 2.0-style examples from ASQA and HotpotQA, and their windows.

Split from :mod:`ambiqa.evaluation.reader_training` (which re-exports every name here): this
module decides *what* the reader learns from -- which spans count as answers, which texts are
no-answer examples, which questions are held out -- and holds no torch code, so the data can be
built, counted and tested without a model.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ambiqa.errors import ConfigError
from ambiqa.evaluation.extractive import Window, locate_answer, windows

if TYPE_CHECKING:
    from ambiqa.evaluation.reader_training import TrainConfig

@dataclass
class ReaderExample:
    """One SQuAD-style example; ``answer_start is None`` marks a no-answer example."""

    qid: str
    question: str
    context: str
    answer: str
    answer_start: int | None
    aliases: list[str]


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

    Sources: ``long_answers`` (always, from ``cfg.train``), ``asqa_passages`` (if
    ``cfg.asqa_passages``: the grounding passages of the same training questions) and
    ``hotpotqa`` (if ``cfg.hotpotqa`` names a HotpotQA training split). The last
    ``cfg.holdout`` questions of ``cfg.train`` are left out of every source: they are the
    training-split validation set (:func:`holdout_examples`). Every split must be a training
    split; evaluation data is refused.
    """
    from ambiqa.data.specs import is_training_split, load_dataset

    for spec in (cfg.train, cfg.hotpotqa):
        if spec and not is_training_split(spec):
            raise ConfigError(f"refusing to train the reader on evaluation data '{spec}'",
                              hint="use training splits, e.g. asqa:train, hotpotqa:train")
    records = list(load_dataset(cfg.train))
    if limit:
        records = records[:limit]
    if cfg.holdout:
        records = records[:-cfg.holdout] if cfg.holdout < len(records) else []
    examples, counts = build_examples(records, removed_negatives=cfg.removed_negatives,
                                      seed=cfg.seed)
    per_source: dict[str, Any] = {**counts, "long_answers_source": dict(counts)}
    if cfg.asqa_passages:
        extra, c = build_passage_examples(records, seed=cfg.seed)
        examples += extra
        per_source["asqa_passages"] = c
    if cfg.hotpotqa:
        hot = list(load_dataset(cfg.hotpotqa))
        if limit:
            hot = hot[:limit]
        extra, c = build_hotpot_examples(hot, seed=cfg.seed)
        examples += extra
        per_source["hotpotqa"] = c
    return examples, per_source


def holdout_examples(cfg: TrainConfig) -> list[ReaderExample]:
    """The training-split validation examples: the grounding-passage examples of the last
    ``cfg.holdout`` questions of ``cfg.train`` (never trained on by a reader that set
    ``holdout``). Used to choose the default reader without touching evaluation data."""
    from ambiqa.data.specs import load_dataset

    if not cfg.holdout:
        return []
    records = list(load_dataset(cfg.train))[-cfg.holdout:]
    return build_passage_examples(records, seed=cfg.seed + 1)[0]


def holdout_long_answer_examples(cfg: TrainConfig) -> list[ReaderExample]:
    """The long-answer examples of the same held-out questions (what D-F1 reads), built as
    for training, answer-sentence-removed negatives included. A reader trained without
    ``holdout`` (v1) has seen these questions, which favours it in any comparison."""
    from ambiqa.data.specs import load_dataset

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
