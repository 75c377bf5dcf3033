"""Loaders for the ambiguous-question data sets: ASQA, AmbigNQ and SituatedQA.

Each gives ``qa_pairs`` (one disambiguated question per reading) or, for SituatedQA, the
context that fixes the reading; field names are listed in :mod:`ambiqa.data.loaders`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dspy

from ambiqa.data._io import Where, dedupe, iter_records, require_list, require_text, text_list
from ambiqa.data.loaders.common import (
    dedupe_passages,
    make_example,
    passage,
    record_id,
    single_split_records,
    take,
    unique_ids,
)
from ambiqa.errors import DataError

# The official ASQA release (ASQA.json) is one object with a mapping per split.
_SPLIT_KEYS = {"train", "dev", "test", "validation"}
_NO_CONTEXT = "no context provided"


def _asqa_unwrap(section: str | None, state: dict[str, bool]) -> Callable[[Any, Path], Any]:
    """Pick ``section`` out of a file keyed by split; ``state["split_keyed"]`` records it."""
    def unwrap(data: Any, path: Path) -> Any:
        if isinstance(data, dict) and data and set(data) <= _SPLIT_KEYS and all(
                isinstance(v, dict | list) for v in data.values()):
            state["split_keyed"] = True
            if section is None:
                raise DataError(
                    f"{path} holds several splits ({', '.join(sorted(data))}); name one",
                    hint=f"use e.g. asqa:{path}#{sorted(data)[0]}")
            if section not in data:
                raise DataError(f"{path} has no split '{section}' "
                                f"(it has: {', '.join(sorted(data))})")
            return data[section]
        return data
    return unwrap


def _split_title(content: str, wikipage: str) -> tuple[str, str]:
    """ASQA train passages are ``"Title\\n\\nText"``; the title may also be given separately."""
    head, sep, rest = content.partition("\n\n")
    if sep and (not wikipage or head.strip() == wikipage.strip()):
        return head.strip(), rest.strip()
    return wikipage, content


def load_asqa(path: str | Path, *, limit: int | None = None, section: str | None = None
              ) -> list[dspy.Example]:
    """ASQA (Stelmakh et al. 2022), any of its layouts.

    Accepts the official ``ASQA.json`` (``{"train": {id: sample}, "dev": {...}}``; pick the
    split with ``section``), a mapping ``{sample_id: sample}``, a list of samples (the shared
    dev copy) and the shared train layout with ``passages[{content, wikipage}]``. In a list
    whose records carry a ``split`` field (the bundled demo), ``section`` filters on it.

    Fields: ``question`` (ambiguous_question), ``qa_pairs``, ``answers`` (all short answers),
    ``long_answers``, ``gold_passages`` (annotation knowledge, qa-pair contexts and grounding
    passages, deduplicated), ``wikipages`` (titles), ``id``.
    """
    path = Path(path)
    out: list[dspy.Example] = []
    state = {"split_keyed": False}
    records = iter_records(path, _asqa_unwrap(section, state))
    if section is not None:
        records = _filter_split(records, section, state)
    for where, rec, key in take(records, limit):
        question = require_text(rec, "ambiguous_question", where)
        pairs = []
        passages: list[dict[str, str] | None] = []
        for i, qa in enumerate(require_list(rec, "qa_pairs", where)):
            name = f"qa_pairs[{i}]"
            if not isinstance(qa, dict):
                raise where.error(f"field '{name}' must be an object")
            pairs.append({
                "question": require_text(qa, "question", where, field=f"{name}.question"),
                "short_answers": text_list(qa.get("short_answers"), where,
                                           f"{name}.short_answers"),
            })
            context = str(qa.get("context") or "")
            if context.strip().lower() != _NO_CONTEXT:
                passages.append(passage(qa.get("wikipage"), context))
        long_answers = []
        for i, ann in enumerate(rec.get("annotations") or []):
            name = f"annotations[{i}]"
            if not isinstance(ann, dict):
                raise where.error(f"field '{name}' must be an object")
            long_answers.append(require_text(ann, "long_answer", where,
                                             field=f"{name}.long_answer"))
            for know in ann.get("knowledge") or []:
                if isinstance(know, dict):
                    passages.append(passage(know.get("wikipage"), know.get("content")))
        for p in rec.get("passages") or []:
            if isinstance(p, dict) and p.get("content"):
                passages.append(passage(*_split_title(str(p["content"]),
                                                       str(p.get("wikipage") or ""))))
        wikipages = [str(w.get("title")) for w in rec.get("wikipages") or []
                     if isinstance(w, dict) and w.get("title")]
        out.append(make_example({
            "id": record_id(rec, ("sample_id", "id"), where, key),
            "question": question,
            "qa_pairs": pairs,
            "answers": dedupe([a for p in pairs for a in p["short_answers"]]),
            "long_answers": long_answers,
            "gold_passages": dedupe_passages(passages),
            "wikipages": wikipages,
        }))
    if section is not None and not out:
        raise DataError(f"{path}: no records with split '{section}'")
    return unique_ids(out)


def _filter_split(records: Iterator[tuple[Where, dict[str, Any], str | None]], section: str,
                  state: dict[str, bool]) -> Iterator[tuple[Where, dict[str, Any], str | None]]:
    """Keep the records whose ``split`` field equals ``section``.

    A file already keyed by split (the official ASQA.json) was narrowed by the unwrap step.
    Otherwise every record must say its split: silently ignoring ``#train`` on a file of dev
    questions would let dev data pass as training data.
    """
    for where, rec, key in records:
        if state["split_keyed"]:
            yield where, rec, key
            continue
        split = rec.get("split")
        if split is None:
            raise where.error(f"cannot select split '{section}': the record has no 'split' "
                              "field", hint="drop the #SPLIT part of the spec")
        if str(split) == section:
            yield where, rec, key


# ---------------------------------------------------------------------------------------------
# AmbigNQ


def load_ambignq(path: str | Path, *, limit: int | None = None, section: str | None = None
                 ) -> list[dspy.Example]:
    """AmbigNQ (Min et al. 2020), light or full release.

    Each annotation is ``singleAnswer`` (``answer``: list) or ``multipleQAs`` (``qaPairs``:
    ``[{question, answer: list}]``). Fields: ``question``, ``ambiguous`` (some annotator found
    several readings), ``qa_pairs`` (the first multipleQAs annotation; for an unambiguous
    question one pair: the question itself with every annotator's answers), ``annotations``
    (every annotation as a qa-pair list, for max-over-annotators scoring), ``answers`` (flat),
    ``id``; from the full release also ``nq_answer`` and ``viewed_doc_titles``
    (``used_queries`` with its search results is not kept).
    """
    out: list[dspy.Example] = []
    for where, rec, key in single_split_records(path, section, limit):
        question = require_text(rec, "question", where)
        annotations = require_list(rec, "annotations", where)
        if not annotations:
            raise where.error("field 'annotations' is empty")
        parsed: list[list[dict[str, Any]]] = []
        ambiguous = False
        for i, ann in enumerate(annotations):
            name = f"annotations[{i}]"
            if not isinstance(ann, dict):
                raise where.error(f"field '{name}' must be an object")
            kind = require_text(ann, "type", where, field=f"{name}.type")
            if kind == "singleAnswer":
                answers = text_list(ann.get("answer"), where, f"{name}.answer")
                parsed.append([{"question": question, "short_answers": answers}])
            elif kind == "multipleQAs":
                ambiguous = True
                pairs = []
                for j, qa in enumerate(require_list(ann, "qaPairs", where,
                                                    field=f"{name}.qaPairs")):
                    qname = f"{name}.qaPairs[{j}]"
                    if not isinstance(qa, dict):
                        raise where.error(f"field '{qname}' must be an object")
                    pairs.append({
                        "question": require_text(qa, "question", where,
                                                 field=f"{qname}.question"),
                        "short_answers": text_list(qa.get("answer"), where, f"{qname}.answer"),
                    })
                parsed.append(pairs)
            else:
                raise where.error(f"field '{name}.type' is '{kind}', expected singleAnswer or "
                                  "multipleQAs")
        all_answers = dedupe([a for pairs in parsed for p in pairs for a in p["short_answers"]])
        if ambiguous:
            qa_pairs = next(p for p, a in zip(parsed, annotations, strict=True)
                            if a["type"] == "multipleQAs")
        else:
            qa_pairs = [{"question": question, "short_answers": all_answers}]
        fields: dict[str, Any] = {
            "id": record_id(rec, ("id",), where, key),
            "question": question,
            "ambiguous": ambiguous,
            "qa_pairs": qa_pairs,
            "annotations": parsed,
            "answers": all_answers,
        }
        if "nq_answer" in rec:
            fields["nq_answer"] = text_list(rec["nq_answer"] or [], where, "nq_answer")
        if isinstance(rec.get("viewed_doc_titles"), list):
            fields["viewed_doc_titles"] = [str(t) for t in rec["viewed_doc_titles"]]
        out.append(make_example(fields))
    return unique_ids(out)


# ---------------------------------------------------------------------------------------------
# SituatedQA


def load_situatedqa(path: str | Path, *, limit: int | None = None, section: str | None = None
                    ) -> list[dspy.Example]:
    """SituatedQA (Zhang & Choi 2021), temporal or geographic JSON Lines.

    Fields: ``question`` (the context-free question), ``edited_question`` (with its context
    spelled out), ``context`` (the date or location), ``context_type`` (``date`` |
    ``location``), ``answers`` (the answer in that context), ``any_answers`` (answers valid in
    some context), ``id`` (repeated rows of one question get ``#n`` suffixes).
    """
    out: list[dspy.Example] = []
    for where, rec, key in single_split_records(path, section, limit):
        question = require_text(rec, "question", where)
        edited = require_text(rec, "edited_question", where)
        if rec.get("date") is not None:
            context_type, context = "date", require_text(rec, "date", where)
        elif rec.get("location") is not None:
            context_type, context = "location", require_text(rec, "location", where)
        else:
            raise where.missing("date' or 'location")
        out.append(make_example({
            "id": record_id(rec, ("id",), where, key),
            "question": question,
            "edited_question": edited,
            "context": context,
            "context_type": context_type,
            "answers": text_list(rec.get("answer"), where, "answer"),
            "any_answers": text_list(rec.get("any_answer") or [], where, "any_answer"),
        }))
    return unique_ids(out)
