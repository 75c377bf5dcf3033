"""Passages trimmed to the sentences nearest the question (``ambiqa.programs.trim``) and the
``trim_sentences`` setting of Diva, ToC and VerDICt: the prompts see the trimmed text, the
programs return the whole passages. A bag-of-words encoder stands in for SentenceBERT."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pytest

from ambiqa.errors import ConfigError
from ambiqa.programs.diva import Diva, DivaConfig
from ambiqa.programs.toc import ToCConfig, TreeOfClarifications
from ambiqa.programs.trim import GAP, join_kept, pick_sentences, trim_passages, trimmed_for
from ambiqa.programs.verdict import VerDICt, VerDICtConfig
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import FixedRetriever, ScriptedRetriever, scripted_lm
from ambiqa.types import Passage

_STOP = frozenset("a an the of in on to was were is are by and who what when did for it he "
                  "she his her they at as with".split())


class BagOfWords:
    """Word-count vectors over a vocabulary grown as words arrive (no hashing, so no
    collisions); stop words are left out so content words decide. Records every batch."""

    def __init__(self, dim: int = 512) -> None:
        self.dim, self.vocab = dim, {}
        self.calls: list[list[str]] = []

    def encode(self, texts: Sequence[str], **_: object) -> np.ndarray:
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dim))
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z0-9]+", text.lower()):
                if word not in _STOP:
                    out[row, self.vocab.setdefault(word, len(self.vocab))] += 1.0
        return out


S1 = "The iPhone is a line of smartphones designed by Apple."
S2 = "The first iPhone was released on June 29, 2007."
S3 = "Its form factor is credited to designer Jonathan Ive."
S4 = "The iPhone 3G followed in July 2008."
S5 = "Sales passed one billion units by 2016."
LONG = Passage("p1", "History of iPhone", " ".join([S1, S2, S3, S4, S5]), 0.7)
SHORT = Passage("p2", "iPhone SE", "The iPhone SE was released in March 2016.", 0.5)


# ---- the trimming itself ------------------------------------------------------------------


def test_keeps_the_nearest_sentences_in_text_order_with_a_gap_mark():
    out = trim_passages([LONG], ["When was the iPhone 3G released?",
                                 "When was the first iPhone released?"], BagOfWords(), 2)
    assert out[0].text == f"{S2}{GAP}{S4}"
    # one sentence: the best match over all query texts (max, not mean)
    (one,) = trim_passages([LONG], ["Who designed the form factor? Jonathan Ive"],
                           BagOfWords(), 1)
    assert one.text == S3


def test_adjacent_kept_sentences_are_joined_by_a_space_not_a_gap():
    (out,) = trim_passages([LONG], ["first iPhone released June 2007 form factor Ive"],
                           BagOfWords(), 2)
    assert out.text == f"{S2} {S3}"


def test_id_title_and_score_are_kept_and_the_input_is_not_changed():
    original = LONG.text
    (out,) = trim_passages([LONG], "first iPhone released", BagOfWords(), 1)
    assert (out.id, out.title, out.score) == (LONG.id, LONG.title, LONG.score)
    assert out.text == S2 and LONG.text == original


def test_short_passages_pass_unchanged_and_need_no_encoder_call():
    enc = BagOfWords()
    out = trim_passages([SHORT, LONG], "anything", enc, 5)
    assert out == [SHORT, LONG] and enc.calls == []
    # mixed: only the long one is trimmed, order kept
    out = trim_passages([SHORT, LONG], "first iPhone released", enc, 1)
    assert out[0] is SHORT and out[1].text == S2


def test_trimming_off_or_no_query_text_returns_the_passages_as_they_are():
    enc = BagOfWords()
    assert trim_passages([LONG], "q", enc, None) == [LONG]
    assert trim_passages([LONG], ["", "  "], enc, 1) == [LONG]
    assert trim_passages([], "q", enc, 1) == []
    assert enc.calls == []


def test_abbreviations_do_not_end_a_sentence():
    text = "The U.S. Army was founded in 1775 by Dr. Smith. It fought in 1812. Paris is far."
    (out,) = trim_passages([Passage("a", "", text)], "Who founded the Army?", BagOfWords(), 1)
    assert out.text == "The U.S. Army was founded in 1775 by Dr. Smith."


def test_a_cache_encodes_each_sentence_once():
    enc, cache = BagOfWords(), {}
    trim_passages([LONG], "first iPhone", enc, 1, cache=cache)
    trim_passages([LONG], "iPhone 3G", enc, 1, cache=cache)
    assert enc.calls[0] == ["first iPhone", S1, S2, S3, S4, S5]
    assert enc.calls[1] == ["iPhone 3G"]  # the sentences came from the cache


def test_pick_and_join_helpers():
    assert pick_sentences([0.1, 0.9, 0.9, 0.2], 2) == [1, 2]
    assert pick_sentences([0.5, 0.5, 0.5], 2) == [0, 1]  # ties: the earlier sentence
    assert join_kept(["a.", "b.", "c.", "d."], [0, 1, 3]) == f"a. b.{GAP}d."


def test_trimmed_for_reads_no_encoder_when_off():
    class Program:
        trim_sentences = None

        @property
        def encoder(self):
            raise AssertionError("the encoder must not be read when trimming is off")

    assert trimmed_for(Program(), [LONG], "q") == [LONG]


# ---- the setting ----------------------------------------------------------------------------


@pytest.mark.parametrize("config_class", [DivaConfig, ToCConfig, VerDICtConfig])
def test_config_refuses_zero_and_non_integers_and_defaults_to_off(config_class):
    assert config_class().trim_sentences is None
    assert config_class(trim_sentences=None).trim_sentences is None
    assert config_class(trim_sentences=2).trim_sentences == 2
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(ConfigError, match="trim_sentences"):
            config_class(trim_sentences=bad)


# ---- Diva ------------------------------------------------------------------------------------

Q = "When was the first iPhone released?"
READINGS = ["When was the first iPhone released?", "When was the iPhone 3G released?"]


def _value(inp: dict, name: str) -> str:
    return inp[name].split("\n\nRespond with")[0]


def _diva_lm():
    return scripted_lm({
        "TypeAmbiguity": {"reason": "which model", "ambiguity_type": "AmbObj"},
        "PseudoInterpretations": {"interpretations": READINGS},
        "VerifyRetrieval": {"evidence": "[1] quoted", "verdict": "yes"},
        "ClarifyFromPassages": {"pairs": [
            {"question": READINGS[0], "answer": "June 29, 2007", "passage": 2}]},
        "WriteLongAnswer": {"long_answer": "The first iPhone came out on June 29, 2007."},
    })


def _diva(**kw) -> Diva:
    retriever = ScriptedRetriever({"p1": LONG, "p2": SHORT}, {}, default=["p2", "p1"])
    return Diva(retriever, encoder=BagOfWords(), top_k=2, **kw)


def test_diva_prompts_read_trimmed_passages_and_the_output_keeps_them_whole(use_lm):
    lm = use_lm(_diva_lm())
    out = _diva(trim_sentences=2)(question=Q)
    assert out.path == "rag"
    prompts = {sig: _value(inp, "passages") for sig, inp in lm.engine.calls
               if sig in ("VerifyRetrieval", "ClarifyFromPassages", "WriteLongAnswer")}
    assert set(prompts) == {"VerifyRetrieval", "ClarifyFromPassages", "WriteLongAnswer"}
    for sig, shown in prompts.items():
        assert f"{S2}{GAP}{S4}" in shown, sig
        assert S1 not in shown and S5 not in shown, sig
        assert SHORT.text in shown, sig  # one sentence: shown whole
    # the output: whole passages, citations by id
    assert {p["id"]: p["text"] for p in out.passages} == {"p1": LONG.text, "p2": SHORT.text}
    cited = [p["id"] for p in out.passages][1]
    assert out.interpretations[0]["passages"] == [cited]


def test_diva_shows_whole_passages_by_default(use_lm):
    lm = use_lm(_diva_lm())
    _diva()(question=Q)
    (clarify,) = [inp for sig, inp in lm.engine.calls if sig == "ClarifyFromPassages"]
    assert LONG.text in clarify["passages"]


# ---- ToC -------------------------------------------------------------------------------------


def test_toc_prompts_read_trimmed_passages_and_the_tree_keeps_them_whole(use_lm):
    lm = use_lm(scripted_lm({
        "ClarifyFromPassages": lambda inp: {"pairs": [
            {"question": READINGS[0], "answer": "June 29, 2007", "passage": 1}]}
            if _value(inp, "question") == Q else {"pairs": []},
        "SelfVerify": {"valid": True},
        "WriteLongAnswer": {"long_answer": "June 29, 2007."},
    }))
    toc = TreeOfClarifications(InMemoryRetriever([LONG, SHORT]), encoder=BagOfWords(),
                               max_workers=1, n_retrieve=2, k=2, trim_sentences=1)
    out = toc(question=Q)
    shown = [(sig, inp) for sig, inp in lm.engine.calls
             if sig in ("ClarifyFromPassages", "SelfVerify", "WriteLongAnswer")]
    assert {sig for sig, _ in shown} == {"ClarifyFromPassages", "SelfVerify", "WriteLongAnswer"}
    for sig, inp in shown:
        text = _value(inp, "passage" if sig == "SelfVerify" else "passages")
        assert S2 in text and S1 not in text and S4 not in text, sig
    assert {p["id"]: p["text"] for p in out.passages}["p1"] == LONG.text
    assert out.interpretations[0]["passages"] == ["p1"]


# ---- VerDICt ---------------------------------------------------------------------------------


def test_verdict_reads_trimmed_passages_and_returns_whole_ones(use_lm):
    lm = use_lm(scripted_lm({
        "RelaxQuery": {"relaxed_query": "first iPhone release date"},
        "InterpretFromPassage": lambda inp: {
            "abstain": False, "interpretation": READINGS[0], "answer": "June 29, 2007"}
            if "June 29" in inp["passage"] else {
            "abstain": True, "interpretation": "none", "answer": "none"},
        "WriteLongAnswer": {"long_answer": "June 29, 2007."},
    }))
    prog = VerDICt(FixedRetriever([LONG, SHORT]), encoder=BagOfWords(), rerank_depth=0,
                   n_passages=2, trim_sentences=1)
    out = prog(question=Q)
    reads = [_value(inp, "passage") for sig, inp in lm.engine.calls
             if sig == "InterpretFromPassage"]
    assert any(S2 in r and S1 not in r and S4 not in r for r in reads)
    (write,) = [inp for sig, inp in lm.engine.calls if sig == "WriteLongAnswer"]
    assert S2 in write["passages"] and S5 not in write["passages"]
    assert out.candidates[0]["passage"] == "p1"
    assert [p["text"] for p in out.passages] == [LONG.text, SHORT.text]


def test_verdict_with_trimming_off_loads_no_encoder_for_one_candidate(use_lm):
    use_lm(scripted_lm({
        "RelaxQuery": {"relaxed_query": "iPhone"},
        "InterpretFromPassage": {"abstain": False, "interpretation": READINGS[0],
                                 "answer": "June 29, 2007"},
        "WriteLongAnswer": {"long_answer": "June 29, 2007."},
    }))
    prog = VerDICt(FixedRetriever([LONG]), rerank_depth=0, n_passages=1)
    prog(question=Q)
    assert VerDICt.encoder.pending(prog)
