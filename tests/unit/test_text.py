"""ambiqa.text: the one answer/question fold, and that its users do not keep their own."""

from __future__ import annotations

import random
import string

from ambiqa.text import normalize_answer, question_key, squad_word


def test_normalize_answer_is_squads_fold() -> None:
    assert normalize_answer("The  U.S. Open, 2017!") == "us open 2017"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer(None) == ""  # type: ignore[arg-type]
    assert normalize_answer("theater") == "theater"  # articles only as whole words


def test_squad_word_gives_the_whole_texts_tokens() -> None:
    rng = random.Random(0)
    alphabet = string.ascii_letters + string.punctuation + "  " + "é"
    for _ in range(300):
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6)))
                 for _ in range(rng.randint(0, 8))] + rng.sample(["a", "An", "THE", "the,"], 2)
        text = " ".join(words)
        by_word = [t for t in (squad_word(w) for w in text.split()) if t]
        assert by_word == normalize_answer(text).split(), text


def test_question_key_ignores_case_punctuation_articles_and_spacing() -> None:
    assert question_key("Who is the  President of France?") == question_key(
        "who is president of france")
    assert question_key("What's new") == "what s new"  # punctuation separates words here
    assert question_key("?!") == ""


def test_metrics_programs_and_the_reader_use_this_module() -> None:
    import ambiqa.evaluation.extractive as extractive
    import ambiqa.evaluation.metrics as metrics
    import ambiqa.programs.resp as resp
    import ambiqa.programs.steps as steps
    import ambiqa.programs.toc as toc
    import ambiqa.programs.verdict as verdict

    assert metrics.normalize_answer is normalize_answer
    assert steps.normalize_answer is toc.normalize_answer is verdict.normalize_answer \
        is normalize_answer
    assert resp.normalize_question is question_key
    assert extractive._norm_word is squad_word
