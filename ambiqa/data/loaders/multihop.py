"""Loaders for the multi-hop data sets: HotpotQA and 2WikiMultihopQA, in the original release
layout or IRCoT's JSON Lines (detected per record).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dspy

from ambiqa.data._io import (
    Where,
    dedupe,
    require,
    require_list,
    require_text,
    text_list,
)
from ambiqa.data.loaders.common import (
    fallback_id,
    make_example,
    single_split_records,
    unique_ids,
)


def _ircot_answers(rec: dict[str, Any], where: Where) -> list[str]:
    answers: list[str] = []
    for i, obj in enumerate(require_list(rec, "answers_objects", where)):
        if not isinstance(obj, dict):
            raise where.error(f"field 'answers_objects[{i}]' must be an object")
        answers += text_list(obj.get("spans") or [], where, f"answers_objects[{i}].spans")
        if str(obj.get("number") or "").strip():
            answers.append(str(obj["number"]).strip())
        date = obj.get("date")
        if isinstance(date, dict):
            parts = [str(date.get(k) or "").strip() for k in ("day", "month", "year")]
            if any(parts):
                answers.append(" ".join(p for p in parts if p))
    answers = dedupe(answers)
    if not answers:
        raise where.error("field 'answers_objects' holds no answer")
    return answers


def _ircot_record(rec: dict[str, Any], where: Where) -> dict[str, Any]:
    contexts = []
    for i, ctx in enumerate(rec.get("contexts") or []):
        if not isinstance(ctx, dict):
            raise where.error(f"field 'contexts[{i}]' must be an object")
        contexts.append({
            "title": str(ctx.get("title") or ""),
            "text": str(require(ctx, "paragraph_text", where,
                                field=f"contexts[{i}].paragraph_text")),
            "is_supporting": bool(ctx.get("is_supporting")),
        })
    answers = _ircot_answers(rec, where)
    return {
        "_id": rec.get("question_id"),
        "question": require_text(rec, "question_text", where),
        "answer": answers[0],
        "answers": answers,
        "supporting_titles": dedupe([c["title"] for c in contexts if c["is_supporting"]]),
        "contexts": contexts,
    }


def _columns_to_pairs(value: Any, first: str, second: str) -> Any:
    """HF-datasets layout ``{"title": [...], "sentences": [...]}`` → ``[[title, sents], ...]``."""
    if isinstance(value, dict) and first in value and second in value:
        return [list(p) for p in zip(value[first], value[second], strict=False)]
    return value


def _original_record(rec: dict[str, Any], where: Where) -> dict[str, Any]:
    question = require_text(rec, "question", where)
    answer = require_text(rec, "answer", where)
    facts = _columns_to_pairs(rec.get("supporting_facts") or [], "title", "sent_id")
    support = []
    for i, fact in enumerate(facts):
        if not isinstance(fact, list | tuple) or not fact:
            raise where.error(f"field 'supporting_facts[{i}]' must be [title, sentence index]")
        support.append(str(fact[0]))
    support = dedupe(support)
    contexts = []
    for i, item in enumerate(_columns_to_pairs(rec.get("context") or [], "title", "sentences")):
        if not isinstance(item, list | tuple) or len(item) != 2:
            raise where.error(f"field 'context[{i}]' must be [title, sentences]")
        title, sentences = item
        sentences = sentences if isinstance(sentences, list) else [sentences]
        contexts.append({
            "title": str(title),
            "text": " ".join(str(s).strip() for s in sentences if str(s).strip()),
            "is_supporting": str(title) in support,
        })
    fields = {
        "_id": rec.get("_id", rec.get("id")),
        "question": question,
        "answer": answer,
        "answers": [answer],
        "supporting_titles": support,
        "contexts": contexts,
    }
    for extra in ("type", "level"):
        if rec.get(extra) is not None:
            fields[extra] = str(rec[extra])
    if "evidences" in rec:
        fields["evidences"] = [list(e) if isinstance(e, list | tuple) else e
                               for e in rec["evidences"] or []]
    return fields


def load_hotpotqa(path: str | Path, *, limit: int | None = None, section: str | None = None
                  ) -> list[dspy.Example]:
    """HotpotQA (Yang et al. 2018): the original JSON release or IRCoT's JSON Lines.

    The layout is detected per record (``question_text`` means IRCoT). Fields: ``question``,
    ``answer`` (str), ``answers`` (list), ``supporting_titles``, ``contexts``
    (``[{title, text, is_supporting}]``), ``id``; ``type`` and ``level`` when given.
    """
    out: list[dspy.Example] = []
    for where, rec, key in single_split_records(path, section, limit):
        fields = _ircot_record(rec, where) if "question_text" in rec else _original_record(
            rec, where)
        raw_id = fields.pop("_id")
        rid = str(raw_id) if raw_id not in (None, "") else (
            key or fallback_id(where))
        out.append(make_example({"id": rid, **fields}))
    return unique_ids(out)


def load_2wikimultihopqa(path: str | Path, *, limit: int | None = None,
                         section: str | None = None) -> list[dspy.Example]:
    """2WikiMultihopQA (Ho et al. 2020): HotpotQA's layout plus ``evidences`` and ``type``.

    Fields as :func:`load_hotpotqa`, plus ``evidences`` (``[subject, relation, object]``
    triples) and ``type`` (comparison, inference, compositional, bridge_comparison).
    """
    return load_hotpotqa(path, limit=limit, section=section)
