"""Answer and question normalisation: the one place text is folded before it is compared.

Two keys, because two questions are asked of text:

* :func:`normalize_answer` -- "is this the same answer?", SQuAD's normalisation (lowercase,
  delete punctuation, drop a/an/the, squeeze whitespace) in the official scripts' order, so
  EM / F1 / D-F1 match the SQuAD and ASQA scorers exactly. Punctuation is *deleted*, so
  "U.S." and "US" are one answer. :func:`squad_word` is the same fold for one word (the
  extractive reader keeps character offsets, so it normalises word by word; the tokens are
  the same as folding the whole text).
* :func:`question_key` -- "is this the same question?" (ReSP's sub-question dedup): words are
  the runs of letters and digits (``\\w+``), casefolded, articles dropped. Punctuation
  *separates* words here, so "what's" keys as "what s"; a question differing only in case,
  punctuation, articles or spacing is not new.

Every layer may use this module (it imports only the standard library): the metrics score
with it, the programs compare answers and questions with it, the reader labels spans with it.
"""

from __future__ import annotations

import re
import string

#: the articles SQuAD drops
ARTICLES: frozenset[str] = frozenset({"a", "an", "the"})
#: ASCII punctuation, SQuAD's ``string.punctuation``
PUNCTUATION: frozenset[str] = frozenset(string.punctuation)

_ARTICLE_WORDS = re.compile(r"\b(a|an|the)\b")
_WORDS = re.compile(r"\w+")


def normalize_answer(text: str) -> str:
    """SQuAD normalization: lowercase, drop punctuation, drop a/an/the, squeeze whitespace.

    The steps run in the official order (lowercase, punctuation, articles, whitespace), so
    scores match the SQuAD / ASQA scripts exactly.
    """
    text = str(text or "").lower()
    text = "".join(ch for ch in text if ch not in PUNCTUATION)
    text = _ARTICLE_WORDS.sub(" ", text)
    return " ".join(text.split())


def squad_word(word: str) -> str:
    """SQuAD normalisation of one whitespace-free word ("" when it vanishes).

    Normalising word by word gives the same tokens as normalising the whole text: punctuation
    is deleted without inserting spaces, and an article can only be a whole word.
    """
    text = "".join(ch for ch in word.lower() if ch not in PUNCTUATION)
    return "" if text in ARTICLES else text


def question_key(text: str) -> str:
    """Comparison key for "is this the same question?": case, punctuation, articles and
    spacing do not make a question new."""
    return " ".join(t for t in _WORDS.findall(str(text or "").casefold()) if t not in ARTICLES)
