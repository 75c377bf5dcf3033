"""Loaders for single-answer open-domain QA: NQ-open, TriviaQA and WebQuestions."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import dspy

from ambiqa.data._io import Where, dedupe, require, require_text, text_list
from ambiqa.data.loaders.common import (
    dedupe_passages,
    make_example,
    passage,
    record_id,
    single_split_records,
    unique_ids,
)
from ambiqa.errors import DataError


def _answers(rec: dict[str, Any], where: Where, keys: tuple[str, ...]) -> list[str]:
    for key in keys:
        if rec.get(key) is not None:
            return text_list(rec[key], where, key)
    raise where.missing(keys[0])


def load_nq(path: str | Path, *, limit: int | None = None, section: str | None = None
            ) -> list[dspy.Example]:
    """NQ-open, with gold passages (``ctxs``, as in lost-in-the-middle's oracle files) or plain.

    Fields: ``question``, ``answers``, ``gold_passages`` (``[{title, text}]``: the ``ctxs``
    flagged ``isgold`` when the file flags them, else every ``ctxs`` entry, else the
    ``nq_annotated_gold`` passage, else empty), ``id``.
    """
    out: list[dspy.Example] = []
    for where, rec, key in single_split_records(path, section, limit):
        question = require_text(rec, "question", where)
        answers = _answers(rec, where, ("answers", "answer"))
        ctxs = rec.get("ctxs") or []
        if not isinstance(ctxs, list):
            raise where.error("field 'ctxs' must be a list")
        ctxs = [c for c in ctxs if isinstance(c, dict)]
        if any("isgold" in c for c in ctxs):
            ctxs = [c for c in ctxs if c.get("isgold")]
        gold = [passage(c.get("title"), c.get("text")) for c in ctxs]
        annotated = rec.get("nq_annotated_gold")
        if not ctxs and isinstance(annotated, dict):
            gold.append(passage(annotated.get("title"), annotated.get("chunked_long_answer")
                                 or annotated.get("long_answer")))
        out.append(make_example({
            "id": record_id(rec, ("id", "question_id"), where, key),
            "question": question,
            "answers": answers,
            "gold_passages": dedupe_passages(gold),
        }))
    return unique_ids(out)


def _triviaqa_unwrap(data: Any, path: Path) -> Any:
    if isinstance(data, dict):
        if "Data" in data:
            return data["Data"]
        raise DataError(f"{path}: a TriviaQA file is an object with a 'Data' list",
                        hint="pass the qa/*.json file of the TriviaQA release")
    return data


def load_triviaqa(path: str | Path, *, limit: int | None = None, section: str | None = None
                  ) -> list[dspy.Example]:
    """TriviaQA (Joshi et al. 2017) ``qa/*.json``: ``{"Data": [{Question, Answer, ...}]}``.

    Fields: ``question``, ``answers`` (the answer's Value then its Aliases), ``id``.
    Lower-case keys (the HF-datasets export) are accepted too.
    """
    out: list[dspy.Example] = []
    for where, rec, key in single_split_records(path, section, limit, _triviaqa_unwrap):
        released = "Question" in rec or "Answer" in rec  # else the lower-case HF export
        qkey, akey = ("Question", "Answer") if released else ("question", "answer")
        question = require_text(rec, qkey, where)
        answer = require(rec, akey, where)
        if not isinstance(answer, dict):
            raise where.error(f"field '{akey}' must be an object with Value and Aliases")
        vkey = "Value" if "Value" in answer else "value"
        value = require_text(answer, vkey, where, field=f"{akey}.{vkey}")
        aliases = text_list(answer.get("Aliases", answer.get("aliases")) or [], where,
                            f"{akey}.Aliases")
        out.append(make_example({
            "id": record_id(rec, ("QuestionId", "question_id"), where, key),
            "question": question,
            "answers": dedupe([value, *aliases]),
        }))
    return unique_ids(out)


# ``(list (description "Jazmine Sullivan") (description Fauvism))`` in the original release.
_TARGET = re.compile(r'\(description\s+(?:"((?:[^"\\]|\\.)*)"|([^()\s][^()]*?))\)')


def _webq_targets(value: str, where: Where) -> list[str]:
    found = [(q.replace('\\"', '"') if q else b).strip() for q, b in _TARGET.findall(value)]
    if not found:
        raise where.error("field 'targetValue' holds no (description ...) answer")
    return dedupe(found)


def load_webq(path: str | Path, *, limit: int | None = None, section: str | None = None
              ) -> list[dspy.Example]:
    """WebQuestions (Berant et al. 2013): GenRead's JSON Lines or the original release.

    GenRead rows are ``{id, question, answer: [str]}``; the original rows are
    ``{utterance, targetValue: "(list (description ...))", url}``. Fields: ``question``,
    ``answers``, ``id``.
    """
    out: list[dspy.Example] = []
    for where, rec, key in single_split_records(path, section, limit):
        if "utterance" in rec and "question" not in rec:
            question = require_text(rec, "utterance", where)
            answers = _webq_targets(require_text(rec, "targetValue", where), where)
        else:
            question = require_text(rec, "question", where)
            answers = _answers(rec, where, ("answer", "answers"))
        out.append(make_example({
            "id": record_id(rec, ("id",), where, key),
            "question": question,
            "answers": answers,
        }))
    return unique_ids(out)
