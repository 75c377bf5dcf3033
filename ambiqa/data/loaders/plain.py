"""Question sets as users have them: one plain JSON Lines layout, usable wherever a data
spec is (``jsonl:PATH[:N]``).

One object per line; ``question`` and at least one kind of gold answer are required::

    {"question": "Who wrote Hamlet?", "answers": ["William Shakespeare", "Shakespeare"]}
    {"id": "q2", "question": "When did the Titanic sink?", "answers": ["1912"]}
    {"question": "Who played Fred Weasley?", "qa_pairs": [{"question": "Who played Fred
      Weasley in the films?", "short_answers": ["James Phelps"]}], "long_answer": "..."}

==================  ==============================================================  ========
field               meaning                                                          needed
==================  ==============================================================  ========
``question``        the question a program receives                                   yes
``answers``         acceptable short answers (a string or a list)                     one of
``qa_pairs``        the question's readings: ``[{question, short_answers}]``          these
``long_answer``     a reference paragraph (or ``long_answers``: a list)               no
``id``              a record id (default: ``<file stem>-<line>``)                     no
``passages``        gold passages ``[{title, text}]`` (or ``gold_passages``)          no
==================  ==============================================================  ========

The metrics that apply follow from the fields present (:func:`metrics_for`): ``answers``
only → ``em``, ``f1``; ``qa_pairs`` → ``str-em``, ``d-f1``; ``qa_pairs`` and a long answer →
ASQA's ``str-em``, ``rouge-l``, ``d-f1``, ``dr``. In a file mixing both kinds of rows, each
row is scored by the metrics of its kind and each metric is reported with its own n.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dspy

from ambiqa.data._io import Where, require_text, text_list
from ambiqa.data.loaders.common import (
    dedupe_passages,
    make_example,
    passage,
    record_id,
    single_split_records,
    unique_ids,
)


def load_jsonl(path: str | Path, *, limit: int | None = None, section: str | None = None
               ) -> list[dspy.Example]:
    """Read the plain layout above; a record without question or answers names the line."""
    out: list[dspy.Example] = []
    for where, rec, key in single_split_records(path, section, limit):
        out.append(make_example(_fields(where, rec, key)))
    return unique_ids(out)


def _fields(where: Where, rec: dict[str, Any], key: str | None) -> dict[str, Any]:
    question = require_text(rec, "question", where)
    answers = text_list(rec.get("answers", rec.get("answer")), where, "answers") \
        if rec.get("answers", rec.get("answer")) is not None else []
    fields: dict[str, Any] = {"id": record_id(rec, ("id", "qid"), where, key),
                              "question": question}
    if rec.get("qa_pairs") is not None:
        raw = rec["qa_pairs"]
        if not isinstance(raw, list) or not raw:
            raise where.error("field 'qa_pairs' must be a non-empty list of {question, "
                              "short_answers}")
        pairs = []
        for i, qa in enumerate(raw):
            name = f"qa_pairs[{i}]"
            if not isinstance(qa, dict):
                raise where.error(f"field '{name}' must be an object")
            pairs.append({"question": require_text(qa, "question", where,
                                                   field=f"{name}.question"),
                          "short_answers": text_list(qa.get("short_answers"), where,
                                                     f"{name}.short_answers")})
        fields["qa_pairs"] = pairs
        answers = answers + [a for p in pairs for a in p["short_answers"]]
    if not answers:
        raise where.error("needs 'answers' (a list of short answers) or 'qa_pairs'",
                          hint='e.g. {"question": "Who wrote Hamlet?", "answers": '
                               '["Shakespeare"]}')
    fields["answers"] = list(dict.fromkeys(answers))
    longs = rec.get("long_answers", rec.get("long_answer"))
    if longs is not None:
        fields["long_answers"] = text_list(longs, where, "long_answer")
    gold = rec.get("passages", rec.get("gold_passages"))
    if gold is not None:
        if not isinstance(gold, list) or not all(isinstance(p, dict) for p in gold):
            raise where.error("field 'passages' must be a list of {title, text}")
        fields["gold_passages"] = dedupe_passages([passage(p.get("title"), p.get("text"))
                                                   for p in gold])
    return fields


def metrics_for(examples: Sequence[Any]) -> list[str]:
    """The metrics the examples can be scored by, from the fields present.

    ASQA-style sets (``qa_pairs`` and a long answer) get ASQA's four: ``str-em``, ``rouge-l``,
    ``d-f1``, ``dr`` (the CLI's long-standing default); ``qa_pairs`` alone give ``str-em`` and
    ``d-f1``; short answers alone give ``em`` and ``f1``. A file mixing short-answer and
    ambiguous rows gets both sets: the runner scores each row by the metrics of its kind
    (:func:`ambiqa.evaluation.registry.row_metrics`) and reports each metric over its rows.
    """
    ambiguous = [ex for ex in examples if getattr(ex, "qa_pairs", None)]
    short = len(examples) - len(ambiguous)
    names: list[str] = []
    if ambiguous:
        longs = all(getattr(ex, "long_answers", None) for ex in ambiguous)
        names += ["str-em", "rouge-l", "d-f1", "dr"] if longs else ["str-em", "d-f1"]
    if short or not examples:
        names += ["em", "f1"]
    return names
