"""benchmarks/trim_tokens.py: tokens of the passages block whole vs trimmed, and which gold
answers stay visible -- on a synthetic row with a bag-of-words encoder and a word counter."""

from __future__ import annotations

from ambiqa.testing import HashEncoder
from benchmarks import trim_tokens

TEXT = ("Weasley family members appear in many books. Fred Weasley was played by James "
        "Phelps. The weather in Scotland is often rainy. George Weasley was played by "
        "Oliver Phelps. Filming took place at Leavesden.")


def _row() -> dict:
    return {"id": "q1", "question": "Who played the Weasley twins?",
            "prediction": {"passages": [{"id": "p1", "title": "Weasley", "text": TEXT}],
                           "pseudo_interpretations": ["Who played Fred Weasley?",
                                                      "Who played George Weasley?"],
                           "votes": [{}, {}], "path": "rag"}}


def test_trimming_counts_fewer_tokens_and_reports_the_answers_it_loses():
    examples = {"q1": {"qa_pairs": [{"short_answers": ["James Phelps"]},
                                    {"short_answers": ["Oliver Phelps"]},
                                    {"short_answers": ["Leavesden"]}]}}
    items = trim_tokens.measure([_row()], examples, HashEncoder(),
                                lambda text: len(text.split()), [1, 2])
    item = items[0]
    assert item["answers_in_whole"] == 3 and item["prompts_with_block"] == 4
    assert item["n1"]["tokens"] < item["n2"]["tokens"] < item["whole"]["tokens"]
    # one sentence per passage cannot show all three answers; what it lost is named
    assert not item["n1"]["kept_all"] and item["n1"]["lost"]
    assert set(item["n1"]["lost"]) <= {"James Phelps", "Oliver Phelps", "Leavesden"}
    summary = trim_tokens.summarize(items, [1, 2])
    assert summary["rows_with_answer_in_whole"] == 1
    assert 0 < summary["n1"]["token_ratio"] < summary["n2"]["token_ratio"] < 1
    assert summary["whole"]["prompt_passage_tokens_per_question"] == \
        4 * item["whole"]["tokens"]
