"""Loaders: released QA data formats → ``dspy.Example`` lists with ``question`` as the input.

Each loader reads one file in the layout its authors released (the full-size original) and
also the trimmed copies under ``shared/data``, which keep the same layouts. The examples share
field names across data sets so metrics and optimizers need no per-data-set code:

==================  ==============================================================
``question``        the question a program receives (the only input field)
``id``              a record id, unique within the loaded list
``answers``         flat list of acceptable short answers (every loader)
``qa_pairs``        ASQA / AmbigNQ / demo: ``[{"question", "short_answers": [str]}]``
``long_answers``    ASQA / demo: the annotators' long answers
``gold_passages``   ASQA / NQ / demo: ``[{"title", "text"}]`` the file gives (may be empty)
==================  ==============================================================

Data-set specific fields are listed on each loader. A malformed record raises
:class:`~ambiqa.errors.DataError` naming the file, the line or record and the field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dspy

from ambiqa.data._io import (
    Where,
    dedupe,
    iter_records,
    require,
    require_list,
    require_text,
    text_list,
)
from ambiqa.errors import ConfigError, DataError

Loader = Callable[..., list[dspy.Example]]

# The official ASQA release (ASQA.json) is one object with a mapping per split.
_SPLIT_KEYS = {"train", "dev", "test", "validation"}
_NO_CONTEXT = "no context provided"


def _example(fields: dict[str, Any]) -> dspy.Example:
    return dspy.Example(**fields).with_inputs("question")


def _finish(examples: list[dspy.Example]) -> list[dspy.Example]:
    """Make ids unique: a repeated id (SituatedQA and NQ repeat rows) gets ``#2``, ``#3``..."""
    taken = {ex.id for ex in examples}
    seen: set[str] = set()
    for ex in examples:
        if ex.id in seen:
            n = 2
            while f"{ex.id}#{n}" in taken:
                n += 1
            ex.id = f"{ex.id}#{n}"
            taken.add(ex.id)
        seen.add(ex.id)
    return examples


def _one_split(section: str | None, path: str | Path) -> None:
    """Only ASQA files hold several splits; a ``#PART`` on any other file is a mistake."""
    if section is not None:
        raise ConfigError(f"{path} holds a single split; '#{section}' selects nothing here",
                          hint="drop the #PART from the spec")


def _record_id(rec: dict[str, Any], keys: tuple[str, ...], fallback: str) -> str:
    for key in keys:
        value = rec.get(key)
        if value is not None and str(value).strip():
            return str(value).strip()
    return fallback


def _fallback_id(path: Path, where: Where) -> str:
    """``<file stem>-<n>`` from the record position: stable for a given file."""
    stem = path.name.split(".")[0] or "record"
    return f"{stem}-{where.label.split()[1]}"


def _take(records: Iterator[tuple[Where, dict[str, Any], str | None]], limit: int | None
          ) -> Iterator[tuple[Where, dict[str, Any], str | None]]:
    for n, item in enumerate(records):
        if limit is not None and n >= limit:
            return
        yield item


def _passage(title: Any, text: Any) -> dict[str, str] | None:
    title = str(title or "").strip()
    text = str(text or "").strip()
    return {"title": title, "text": text} if text else None


def _dedupe_passages(passages: list[dict[str, str] | None]) -> list[dict[str, str]]:
    out: dict[tuple[str, str], dict[str, str]] = {}
    for p in passages:
        if p is not None:
            out.setdefault((p["title"], p["text"]), p)
    return list(out.values())


# ---------------------------------------------------------------------------------------------
# ASQA


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
    for where, rec, key in _take(records, limit):
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
                passages.append(_passage(qa.get("wikipage"), context))
        long_answers = []
        for i, ann in enumerate(rec.get("annotations") or []):
            name = f"annotations[{i}]"
            if not isinstance(ann, dict):
                raise where.error(f"field '{name}' must be an object")
            long_answers.append(require_text(ann, "long_answer", where,
                                             field=f"{name}.long_answer"))
            for know in ann.get("knowledge") or []:
                if isinstance(know, dict):
                    passages.append(_passage(know.get("wikipage"), know.get("content")))
        for p in rec.get("passages") or []:
            if isinstance(p, dict) and p.get("content"):
                passages.append(_passage(*_split_title(str(p["content"]),
                                                       str(p.get("wikipage") or ""))))
        wikipages = [str(w.get("title")) for w in rec.get("wikipages") or []
                     if isinstance(w, dict) and w.get("title")]
        out.append(_example({
            "id": _record_id(rec, ("sample_id", "id"), key or _fallback_id(path, where)),
            "question": question,
            "qa_pairs": pairs,
            "answers": dedupe([a for p in pairs for a in p["short_answers"]]),
            "long_answers": long_answers,
            "gold_passages": _dedupe_passages(passages),
            "wikipages": wikipages,
        }))
    if section is not None and not out:
        raise DataError(f"{path}: no records with split '{section}'")
    return _finish(out)


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
    _one_split(section, path)
    path = Path(path)
    out: list[dspy.Example] = []
    for where, rec, key in _take(iter_records(path), limit):
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
            "id": _record_id(rec, ("id",), key or _fallback_id(path, where)),
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
        out.append(_example(fields))
    return _finish(out)


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
    _one_split(section, path)
    path = Path(path)
    out: list[dspy.Example] = []
    for where, rec, key in _take(iter_records(path), limit):
        question = require_text(rec, "question", where)
        edited = require_text(rec, "edited_question", where)
        if rec.get("date") is not None:
            context_type, context = "date", require_text(rec, "date", where)
        elif rec.get("location") is not None:
            context_type, context = "location", require_text(rec, "location", where)
        else:
            raise where.missing("date' or 'location")
        out.append(_example({
            "id": _record_id(rec, ("id",), key or _fallback_id(path, where)),
            "question": question,
            "edited_question": edited,
            "context": context,
            "context_type": context_type,
            "answers": text_list(rec.get("answer"), where, "answer"),
            "any_answers": text_list(rec.get("any_answer") or [], where, "any_answer"),
        }))
    return _finish(out)


# ---------------------------------------------------------------------------------------------
# HotpotQA and 2WikiMultihopQA


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
    _one_split(section, path)
    path = Path(path)
    out: list[dspy.Example] = []
    for where, rec, key in _take(iter_records(path), limit):
        fields = _ircot_record(rec, where) if "question_text" in rec else _original_record(
            rec, where)
        raw_id = fields.pop("_id")
        record_id = str(raw_id) if raw_id not in (None, "") else (
            key or _fallback_id(path, where))
        out.append(_example({"id": record_id, **fields}))
    return _finish(out)


def load_2wikimultihopqa(path: str | Path, *, limit: int | None = None,
                         section: str | None = None) -> list[dspy.Example]:
    """2WikiMultihopQA (Ho et al. 2020): HotpotQA's layout plus ``evidences`` and ``type``.

    Fields as :func:`load_hotpotqa`, plus ``evidences`` (``[subject, relation, object]``
    triples) and ``type`` (comparison, inference, compositional, bridge_comparison).
    """
    return load_hotpotqa(path, limit=limit, section=section)


# ---------------------------------------------------------------------------------------------
# single-answer open-domain QA


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
    _one_split(section, path)
    path = Path(path)
    out: list[dspy.Example] = []
    for where, rec, key in _take(iter_records(path), limit):
        question = require_text(rec, "question", where)
        answers = _answers(rec, where, ("answers", "answer"))
        ctxs = rec.get("ctxs") or []
        if not isinstance(ctxs, list):
            raise where.error("field 'ctxs' must be a list")
        ctxs = [c for c in ctxs if isinstance(c, dict)]
        if any("isgold" in c for c in ctxs):
            ctxs = [c for c in ctxs if c.get("isgold")]
        gold = [_passage(c.get("title"), c.get("text")) for c in ctxs]
        annotated = rec.get("nq_annotated_gold")
        if not ctxs and isinstance(annotated, dict):
            gold.append(_passage(annotated.get("title"), annotated.get("chunked_long_answer")
                                 or annotated.get("long_answer")))
        out.append(_example({
            "id": _record_id(rec, ("id", "question_id"), key or _fallback_id(path, where)),
            "question": question,
            "answers": answers,
            "gold_passages": _dedupe_passages(gold),
        }))
    return _finish(out)


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
    _one_split(section, path)
    path = Path(path)
    out: list[dspy.Example] = []
    for where, rec, key in _take(iter_records(path, _triviaqa_unwrap), limit):
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
        out.append(_example({
            "id": _record_id(rec, ("QuestionId", "question_id"),
                             key or _fallback_id(path, where)),
            "question": question,
            "answers": dedupe([value, *aliases]),
        }))
    return _finish(out)


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
    _one_split(section, path)
    path = Path(path)
    out: list[dspy.Example] = []
    for where, rec, key in _take(iter_records(path), limit):
        if "utterance" in rec and "question" not in rec:
            question = require_text(rec, "utterance", where)
            answers = _webq_targets(require_text(rec, "targetValue", where), where)
        else:
            question = require_text(rec, "question", where)
            answers = _answers(rec, where, ("answer", "answers"))
        out.append(_example({
            "id": _record_id(rec, ("id",), key or _fallback_id(path, where)),
            "question": question,
            "answers": answers,
        }))
    return _finish(out)


# Format name → loader; a dataset spec's name is looked up here for ``FORMAT:/path`` specs.
FORMATS: dict[str, Loader] = {
    "asqa": load_asqa,
    "ambignq": load_ambignq,
    "situatedqa": load_situatedqa,
    "hotpotqa": load_hotpotqa,
    "2wikimultihopqa": load_2wikimultihopqa,
    "nq": load_nq,
    "triviaqa": load_triviaqa,
    "webq": load_webq,
}
