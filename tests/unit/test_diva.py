"""Diva (Algorithm 1) and the query-refinement baseline, with the scripted LM.

A fake encoder with hand-made vectors stands in for SentenceBERT, so the pruning order is known
exactly; a recording retriever shows which queries were searched.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from ambiqa.errors import ConfigError
from ambiqa.programs.diva import Diva, clean_interpretations
from ambiqa.programs.query_refinement import QueryRefinementClosedBook
from ambiqa.programs.registry import build_program
from ambiqa.retrieval.base import check_query, timed_search
from ambiqa.testing import scripted_lm
from ambiqa.types import Passage

Q = "Who played the Weasley brothers in Harry Potter?"
RON = "Who played Ron Weasley in Harry Potter?"
PERCY = "Who played Percy Weasley in Harry Potter?"
FRED = "Who played Fred Weasley in Harry Potter?"


def _p(pid: str, text: str) -> Passage:
    return Passage(pid, f"Title {pid}", text)


PASSAGES = {
    "ron": _p("ron", "Rupert Grint played Ron Weasley."),
    "percy": _p("percy", "Chris Rankin played Percy Weasley."),
    "fred": _p("fred", "James Phelps played Fred Weasley."),
    "both": _p("both", "The Weasley brothers were played by several actors."),
    "noise": _p("noise", "Paris is the capital of France."),
}


class RecordingRetriever:
    """Returns scripted passage ids per query and records every search."""

    name = "recording"
    fingerprint = "recording:test"

    def __init__(self, results: dict[str, list[str]], default: Sequence[str] = ()) -> None:
        self.results = results
        self.default = list(default)
        self.searches: list[tuple[str, int]] = []

    def search(self, query: str, k: int = 5) -> list[Passage]:
        query, k = check_query(query, k)
        with timed_search(self.name, query, k):
            self.searches.append((query, k))
            ids = self.results.get(query, self.default)[:k]
            return [PASSAGES[i].with_score(1.0 / (r + 1)) for r, i in enumerate(ids)]

    def batch_search(self, queries: Sequence[str], k: int = 5) -> list[list[Passage]]:
        return [self.search(q, k) for q in queries]

    def get(self, pid: str) -> Passage | None:
        return PASSAGES.get(pid)


class FakeEncoder:
    """``encode`` looks each text up by a key it contains; unknown texts get ``fallback``."""

    def __init__(self, vectors: dict[str, Sequence[float]], dim: int = 3) -> None:
        self.vectors = {k: np.asarray(v, dtype=np.float32) for k, v in vectors.items()}
        self.fallback = np.ones(dim, dtype=np.float32)
        self.batches: list[list[str]] = []

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.batches.append(list(texts))
        rows = []
        for t in texts:
            match = [v for k, v in self.vectors.items() if k in t]
            rows.append(match[0] if match else self.fallback)
        return np.stack(rows) if rows else np.zeros((0, len(self.fallback)), dtype=np.float32)


def _handlers(readings: list[str], supported: set[str], kind: str = "AmbObj") -> dict:
    return {
        "TypeAmbiguity": {"reason": "'Weasley brothers' names several characters.",
                          "ambiguity_type": kind},
        "PseudoInterpretations": {"interpretations": readings},
        "VerifyInterpretation": lambda inp: {"supported": inp["interpretation"] in supported},
        "ClarifyFromPassages": {"pairs": [
            {"question": RON, "answer": "Rupert Grint", "passage": 1},
            {"question": PERCY, "answer": "Chris Rankin", "passage": 2}]},
        "WriteLongAnswer": {"long_answer": "Several actors played Weasley brothers."},
        "ClosedBookLongAnswer": {"long_answer": "From memory: Rupert Grint and others."},
    }


def _retriever() -> RecordingRetriever:
    return RecordingRetriever({RON: ["ron", "both"], PERCY: ["percy", "both"],
                               FRED: ["fred", "noise"], Q: ["both", "noise"]})


def _diva(**kw) -> Diva:
    kw.setdefault("encoder", FakeEncoder({}))
    return Diva(kw.pop("retriever", None) or _retriever(), **kw)


# ---- adaptive generation paths -------------------------------------------------------------


def test_useless_takes_closed_book_path_without_clarify(use_lm):
    lm = use_lm(scripted_lm(_handlers([RON, PERCY], supported=set())))
    out = _diva()(question=Q)
    assert out.verdict == "Useless" and out.path == "closed_book"
    assert out.answer == "From memory: Rupert Grint and others."
    assert out.interpretations == []
    assert out.pseudo_interpretations == [RON, PERCY]
    assert [v["supported"] for v in out.votes] == [False, False]
    assert lm.engine.count("ClarifyFromPassages") == 0
    assert lm.engine.count("WriteLongAnswer") == 0
    assert lm.engine.count("ClosedBookLongAnswer") == 1
    # the passages read for verification are still reported
    assert {p["id"] for p in out.passages} == {"ron", "percy", "both"}


def test_useful_when_every_interpretation_is_supported(use_lm):
    lm = use_lm(scripted_lm(_handlers([RON, PERCY], supported={RON, PERCY})))
    out = _diva(top_k=2)(question=Q)
    assert out.verdict == "Useful" and out.path == "rag"
    assert out.answer == "Several actors played Weasley brothers."
    assert lm.engine.count("ClosedBookLongAnswer") == 0
    assert lm.engine.count("ClarifyFromPassages") == 1
    # Clarify reads the question itself (eq. 1) and exactly the kept passages
    (clarify_inputs,) = [inp for sig, inp in lm.engine.calls if sig == "ClarifyFromPassages"]
    assert Q in clarify_inputs["question"]
    kept = [p["id"] for p in out.passages]
    assert len(kept) == 2
    for pid in kept:
        assert PASSAGES[pid].text in clarify_inputs["passages"]
    # cited numbers map to ids of the kept passages
    assert out.interpretations[0]["passages"] == [kept[0]]
    assert out.interpretations[1]["passages"] == [kept[1]]


def test_partial_useful_still_takes_rag_path(use_lm):
    lm = use_lm(scripted_lm(_handlers([RON, PERCY, FRED], supported={PERCY})))
    out = _diva()(question=Q)
    assert out.verdict == "PartialUseful" and out.path == "rag"
    assert [v["supported"] for v in out.votes] == [False, True, False]
    assert lm.engine.count("WriteLongAnswer") == 1
    assert lm.engine.count("ClosedBookLongAnswer") == 0


def test_one_verification_and_one_search_per_interpretation(use_lm):
    lm = use_lm(scripted_lm(_handlers([RON, PERCY, FRED], supported={RON})))
    retriever = _retriever()
    out = _diva(retriever=retriever, k_per_query=2)(question=Q)
    assert lm.engine.count("VerifyInterpretation") == 3
    asked = sorted(inp["interpretation"] for sig, inp in lm.engine.calls
                   if sig == "VerifyInterpretation")
    assert asked == sorted([RON, PERCY, FRED])
    # eq. 4 unions over the interpretations; the question is not searched on its own
    assert retriever.searches == [(RON, 2), (PERCY, 2), (FRED, 2)]
    assert out.trace["retriever_calls"] == 3
    assert out.trace["calls_by_module"]["VerifyInterpretation"] == 3
    assert out.trace["lm_calls"] == 2 + 3 + 2  # type + rewrite, 3 verifications, clarify + write


def test_verifications_run_concurrently(use_lm, monkeypatch):
    monkeypatch.setenv("AMBIQA_PARALLEL", "4")
    use_lm(scripted_lm(_handlers([RON, PERCY, FRED], supported={RON}), delay_s=0.15))
    out = _diva()(question=Q)
    # overlapping verification calls make the critical path clearly shorter than the sum
    assert out.trace["critical_path_s"] < out.trace["lm_latency_s"] - 0.15


# ---- diversification and pruning ------------------------------------------------------------


def test_pruning_keeps_highest_mean_cosine_not_highest_max():
    # The two interpretations are orthogonal; "both" sits between them.
    encoder = FakeEncoder({
        RON: [1, 0, 0], PERCY: [0, 1, 0],
        PASSAGES["ron"].text: [1, 0, 0], PASSAGES["both"].text: [1, 1, 0],
        PASSAGES["fred"].text: [0.99, 0.0, 0.141], PASSAGES["noise"].text: [0, 0, 1],
        PASSAGES["percy"].text: [0.2, 0.8, 0.56],
    })
    prog = Diva(RecordingRetriever({}), top_k=2, encoder=encoder)
    pool = [PASSAGES[i] for i in ["noise", "fred", "ron", "percy", "both"]]
    kept = prog.prune([RON, PERCY], pool)
    scores = {p.id: p.score for p in kept}
    # means: both 0.707, percy 0.502, ron 0.500, fred 0.495, noise 0; a max-cosine rule
    # would keep ron (1.0) and fred (0.99) instead
    assert [p.id for p in kept] == ["both", "percy"]
    assert scores["both"] == pytest.approx(np.sqrt(0.5))
    assert scores["percy"] == pytest.approx((0.2 + 0.8) / 2 / np.linalg.norm([0.2, 0.8, 0.56]))
    prog.top_k = 5
    assert [p.id for p in prog.prune([RON, PERCY], pool)] == [
        "both", "percy", "ron", "fred", "noise"]


def test_pruning_in_the_program_uses_all_interpretations(use_lm):
    use_lm(scripted_lm(_handlers([RON, PERCY], supported={RON, PERCY})))
    encoder = FakeEncoder({
        RON: [1, 0, 0], PERCY: [0, 1, 0],
        PASSAGES["ron"].text: [1, 0, 0], PASSAGES["percy"].text: [0, 1, 0],
        PASSAGES["both"].text: [1, 1, 0],
    })
    out = _diva(encoder=encoder, top_k=1)(question=Q)
    assert [p["id"] for p in out.passages] == ["both"]
    assert out.passages[0]["score"] == pytest.approx(np.sqrt(0.5))


def test_union_dedupes_passage_ids(use_lm):
    use_lm(scripted_lm(_handlers([RON, PERCY], supported={RON})))
    encoder = FakeEncoder({})
    out = _diva(encoder=encoder, top_k=10)(question=Q)
    ids = [p["id"] for p in out.passages]
    assert sorted(ids) == ["both", "percy", "ron"]  # "both" was retrieved twice
    assert out.pool_size == 3
    # the encoder scored each unique passage once
    passage_batches = [b for b in encoder.batches if any("Title" in t for t in b)]
    assert len(passage_batches) == 1 and len(passage_batches[0]) == 3


def test_candidate_pool_mode_reranks_the_question_pool(use_lm):
    use_lm(scripted_lm(_handlers([RON, PERCY], supported={RON, PERCY})))
    retriever = RecordingRetriever({Q: ["noise", "fred", "ron", "percy", "both"]})
    encoder = FakeEncoder({
        RON: [1, 0, 0], PERCY: [0, 1, 0],
        PASSAGES["ron"].text: [1, 0, 0], PASSAGES["percy"].text: [0, 1, 0],
        PASSAGES["both"].text: [1, 1, 0], PASSAGES["fred"].text: [0, 0, 1],
        PASSAGES["noise"].text: [0, 0, 1],
    })
    out = Diva(retriever, candidates=5, k_per_query=1, top_k=5, encoder=encoder)(question=Q)
    assert retriever.searches == [(Q, 5)]  # one first-stage search for the question (C_i)
    assert sorted(p["id"] for p in out.passages) == ["percy", "ron"]  # each reading's top-1
    assert out.pool_size == 2


def test_no_passages_is_useless_without_verification_calls(use_lm):
    lm = use_lm(scripted_lm(_handlers([RON, PERCY], supported={RON})))
    out = _diva(retriever=RecordingRetriever({}))(question=Q)
    assert out.verdict == "Useless" and out.path == "closed_book"
    assert lm.engine.count("VerifyInterpretation") == 0
    assert any("no passages" in e for e in out.trace["events"])


# ---- typing and pseudo-interpretations ------------------------------------------------------


def test_type_none_gives_a_single_interpretation(use_lm):
    question = "What is the capital of France?"
    handlers = _handlers([], supported={question}, kind="None")
    handlers["ClarifyFromPassages"] = {"pairs": [
        {"question": question, "answer": "Paris", "passage": 1}]}
    lm = use_lm(scripted_lm(handlers))
    retriever = RecordingRetriever({question: ["noise"]})
    out = _diva(retriever=retriever)(question=question)
    assert out.ambiguity_type == "None"
    assert out.pseudo_interpretations == [question]
    assert lm.engine.count("PseudoInterpretations") == 0
    assert retriever.searches == [(question, 5)]
    assert lm.engine.count("VerifyInterpretation") == 1
    assert out.verdict == "Useful" and out.path == "rag"
    assert out.interpretations == [{"question": question, "answer": "Paris",
                                    "passages": ["noise"]}]


def test_unparseable_typing_degrades_to_the_question(use_lm):
    handlers = _handlers([RON, PERCY], supported={Q})
    handlers["TypeAmbiguity"] = "I think it is ambiguous, maybe."
    lm = use_lm(scripted_lm(handlers))
    out = _diva()(question=Q)
    assert out.ambiguity_type is None and out.reason == ""
    assert out.pseudo_interpretations == [Q]
    assert lm.engine.count("PseudoInterpretations") == 0
    assert any(e.startswith("type_ambiguity") for e in out.trace["events"])
    assert out.verdict == "Useful" and out.answer


def test_unknown_type_label_degrades(use_lm):
    handlers = _handlers([RON], supported={Q}, kind="[AmbObj]")
    use_lm(scripted_lm(handlers))
    out = _diva()(question=Q)
    assert out.pseudo_interpretations == [Q]
    assert any("type_ambiguity" in e for e in out.trace["events"])


def test_unparseable_or_empty_interpretations_degrade(use_lm):
    for reply in ("no fields here", {"interpretations": ["  ", ""]}):
        handlers = _handlers([], supported={Q})
        handlers["PseudoInterpretations"] = reply
        use_lm(scripted_lm(handlers))
        out = _diva()(question=Q)
        assert out.ambiguity_type == "AmbObj"
        assert out.pseudo_interpretations == [Q]
        assert any("pseudo_interpretations" in e for e in out.trace["events"])


def test_all_verifications_unparseable_is_useless(use_lm):
    handlers = _handlers([RON, PERCY], supported=set())
    handlers["VerifyInterpretation"] = "cannot tell"
    lm = use_lm(scripted_lm(handlers))
    out = _diva()(question=Q)
    assert out.verdict == "Useless" and out.path == "closed_book"
    assert [v["supported"] for v in out.votes] == [None, None]
    assert lm.engine.count("ClarifyFromPassages") == 0
    assert any("no verification parsed" in e for e in out.trace["events"])


def test_interpretations_are_cleaned_deduplicated_and_capped(use_lm):
    readings = ["1: " + RON, "2. " + PERCY, "3) " + RON.lower(), "", FRED]
    use_lm(scripted_lm(_handlers(readings, supported={RON})))
    out = _diva(max_interpretations=2)(question=Q)
    assert out.pseudo_interpretations == [RON, PERCY]
    assert clean_interpretations("- A?\n- B?\n", 5) == ["A?", "B?"]


def test_prediction_is_json_serializable(use_lm):
    import json

    use_lm(scripted_lm(_handlers([RON, PERCY], supported={RON})))
    out = _diva()(question=Q)
    json.dumps(dict(out.items()))


# ---- configuration ---------------------------------------------------------------------------


def test_config_and_bad_settings():
    prog = build_program("diva", retriever=_retriever(), k_per_query=4, top_k=3)
    assert prog.config() == {"k_per_query": 4, "top_k": 3, "candidates": 0,
                             "max_interpretations": 8}
    assert Diva().config()["k_per_query"] == 5 and Diva().config()["top_k"] == 5
    for bad in ({"top_k": 0}, {"k_per_query": "5"}, {"candidates": -1},
                {"max_interpretations": 0}, {"top_k": True}):
        with pytest.raises(ConfigError):
            Diva(_retriever(), **bad)
    with pytest.raises(ConfigError):
        build_program("diva", nonsense=1)


def test_diva_needs_a_retriever(use_lm):
    use_lm(scripted_lm(_handlers([RON], supported={RON})))
    with pytest.raises(ConfigError, match="needs a retriever"):
        Diva(encoder=FakeEncoder({}))(question=Q)


def test_deepcopy_shares_the_encoder():
    import copy

    from ambiqa.types import SharedResource

    class SharedFake(FakeEncoder, SharedResource):
        pass

    enc = SharedFake({})
    prog = Diva(_retriever(), encoder=enc)
    assert copy.deepcopy(prog).encoder is enc
    assert prog.deepcopy().encoder is enc  # what teleprompters call
    assert len(prog.named_predictors()) == 6


# ---- query refinement (closed-book) ---------------------------------------------------------


def test_query_refinement_answers_closed_book_covering_readings(use_lm):
    lm = use_lm(scripted_lm(_handlers([RON, PERCY], supported=set())))
    prog = build_program("query_refinement")
    assert isinstance(prog, QueryRefinementClosedBook) and not prog.needs_retriever
    out = prog(question=Q)
    assert out.answer == "Several actors played Weasley brothers."
    assert out.pseudo_interpretations == [RON, PERCY]
    assert out.interpretations == [] and out.passages == []
    assert out.trace["retriever_calls"] == 0
    assert out.trace["calls_by_module"] == {"TypeAmbiguity": 1, "PseudoInterpretations": 1,
                                            "WriteLongAnswer": 1}
    (inputs,) = [inp for sig, inp in lm.engine.calls if sig == "WriteLongAnswer"]
    assert RON in inputs["interpretations"] and PERCY in inputs["interpretations"]
    assert inputs["passages"].startswith("(no passages)")


def test_query_refinement_degrades_to_the_question(use_lm):
    handlers = _handlers([RON], supported=set())
    handlers["TypeAmbiguity"] = "garbage"
    use_lm(scripted_lm(handlers))
    out = QueryRefinementClosedBook()(question=Q)
    assert out.pseudo_interpretations == [Q]
    assert out.answer
    assert any("type_ambiguity" in e for e in out.trace["events"])
