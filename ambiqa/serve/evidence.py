"""What the answer endpoint returns: the prediction as JSON, each citation with the sentence
of its passage that supports the interpretation.

Why a supporting sentence: the programs cite passages by id, and a passage is a paragraph; a
person checking an answer wants the one sentence that says it. No program asks the LM for
that sentence (it would cost a call per citation), so it is found here, without a model: the
sentence that contains the interpretation's answer (normalised as the EM metric normalises),
else the sentence with the most answer words, then question words, in common. ``how`` says
which rule picked it, so the page never presents a guess as a quotation of the answer.
"""

from __future__ import annotations

import re
from typing import Any

from ambiqa.evaluation.metrics import normalize_answer

# A sentence ends at . ! or ? followed by space and an upper-case letter, digit or quote;
# abbreviations such as "U.S. Army" mostly survive because the next word is not split on.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """Split a passage into sentences (a plain rule: enough for picking one to show)."""
    return [s.strip() for s in _SENTENCE_END.split(text or "") if s.strip()]


def _words(text: str) -> set[str]:
    return set(normalize_answer(text).split())


def supporting_sentence(text: str, answer: str, question: str = "") -> dict[str, str]:
    """``{"sentence", "how"}`` for the sentence of ``text`` that best supports ``answer``.

    ``how`` is ``"contains the answer"``, ``"shares words with the answer"``, ``"shares words
    with the question"`` or ``"first sentence"`` (nothing in common: the passage's opening).
    """
    sentences = split_sentences(text)
    if not sentences:
        return {"sentence": "", "how": "empty passage"}
    norm_answer = normalize_answer(answer or "")
    if norm_answer:
        for s in sentences:
            if f" {norm_answer} " in f" {normalize_answer(s)} ":
                return {"sentence": s, "how": "contains the answer"}
    a_words, q_words = _words(answer or ""), _words(question or "")
    scored = [(len(a_words & _words(s)), len(q_words & _words(s)), -i, s)
              for i, s in enumerate(sentences)]
    best = max(scored)
    if best[0] > 0:
        return {"sentence": best[3], "how": "shares words with the answer"}
    if best[1] > 0:
        return {"sentence": best[3], "how": "shares words with the question"}
    return {"sentence": sentences[0], "how": "first sentence"}


def answer_payload(pred: Any) -> dict[str, Any]:
    """The JSON body of a successful ``POST /v1/answer``.

    ``interpretations`` keep the program's cited ids (``passages``) and add ``citations``: for
    each cited id that is among the passages read, its title, text and supporting sentence.
    A cited id the program did not read (a model inventing one) is listed in ``unknown_ids``
    rather than dropped silently.
    """
    passages = [dict(p) for p in (getattr(pred, "passages", None) or [])]
    by_id = {str(p.get("id")): p for p in passages}
    interpretations = []
    for it in getattr(pred, "interpretations", None) or []:
        it = dict(it)
        ids = [str(i) for i in (it.get("passages") or [])]
        citations, unknown = [], []
        for pid in ids:
            p = by_id.get(pid)
            if p is None:
                unknown.append(pid)
                continue
            support = supporting_sentence(str(p.get("text", "")), str(it.get("answer", "")),
                                          str(it.get("question", "")))
            citations.append({"id": pid, "title": p.get("title", ""), "text": p.get("text", ""),
                              "supporting_sentence": support["sentence"],
                              "support": support["how"]})
        interpretations.append({"question": str(it.get("question", "")),
                                "answer": str(it.get("answer", "")), "passages": ids,
                                "citations": citations, "unknown_ids": unknown})
    trace = dict(getattr(pred, "trace", None) or {})
    return {"answer": str(getattr(pred, "answer", "") or ""),
            "interpretations": interpretations, "passages": passages, "trace": trace}
