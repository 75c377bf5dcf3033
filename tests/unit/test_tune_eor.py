"""EoR voter-weight tuning over cached answers: exact vote, zero LM calls, outputs."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

import ambiqa
from ambiqa.cli import main
from ambiqa.errors import ConfigError
from ambiqa.optimizers import eor_weights as ew
from ambiqa.programs.eor import POOLINGS, EoR, similarity_matrices, vote
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import scripted_lm
from ambiqa.tracing import track
from ambiqa.types import Passage
from tests.unit.test_optim_compile import HashEncoder

MEMBERS = ["Wiki@10", "Wiki@RR@5", "BM25@5", "PK", "ReFree"]
# chance that a member answers right; PK and ReFree agree on the same wrong answer often
SKILL = {"Wiki@10": 0.8, "Wiki@RR@5": 0.6, "BM25@5": 0.5, "PK": 0.1, "ReFree": 0.1}


def synthetic_rows(n: int, seed: int = 0, drop: float = 0.1) -> list[dict]:
    rng = random.Random(seed)
    enc = HashEncoder()
    rows = []
    for i in range(n):
        gold = f"answer {i}"
        answers = {}
        for m in MEMBERS:
            if rng.random() < drop and m != "Wiki@10":
                continue  # a failed member: absent from the vote
            if rng.random() < SKILL[m]:
                answers[m] = gold
            elif m in ("PK", "ReFree"):
                answers[m] = f"wrong {i}"
            else:
                answers[m] = f"other {rng.randint(0, 99)}"
        sims = similarity_matrices(list(answers.values()), ("em", "f1", "emb"), encoder=enc)
        rows.append({"id": f"q{i}", "question": f"q{i}?", "gold": [gold], "answers": answers,
                     "similarities": sims})
    return rows


def random_weights(rng: random.Random, metrics: list[str], pooling: str) -> dict:
    return {"metric_weights": {m: rng.choice([0.0, rng.random()]) for m in metrics},
            "retriever_weights": {s: rng.random() * 0.6 for s in MEMBERS},
            "threshold": rng.choice([0.0, 0.1, 0.3]), "pooling": pooling,
            "equivalence": rng.choice([0.3, 0.5, 0.9])}


def test_vectorized_vote_equals_the_programs_vote():
    cache = ew.Cache(synthetic_rows(60, seed=1), "em")
    rng = random.Random(7)
    for _ in range(40):
        for pooling in POOLINGS:
            w = random_weights(rng, cache.metrics, pooling)
            winners = ew.vote_batch(cache, w)
            for row, col in zip(cache.questions, winners, strict=True):
                want, _ = vote(row["answers"], row["similarities"], w["metric_weights"],
                               w["retriever_weights"], w["threshold"], pooling,
                               w["equivalence"])
                got = cache.members[col] if col >= 0 else None
                assert got == want, (pooling, w, row["answers"])


def test_tuning_spends_no_lm_call_and_beats_default_weights():
    import dspy

    train = ew.Cache(synthetic_rows(150, seed=2), "em")
    dev = ew.Cache(synthetic_rows(80, seed=3), "em")
    lm = scripted_lm({}, default=AssertionError("the LM must not be called"))
    with dspy.context(lm=lm), track() as trace:
        result = ew.tune_weights(train, trials=1000, seed=0)
    assert trace.lm_calls == 0 and not lm.engine.calls
    assert result.trials == 1000 and result.trials_per_s > 50
    default = ew.accuracy(train, ew.DEFAULT_WEIGHTS)
    assert result.value >= default
    assert ew.accuracy(dev, result.weights) >= ew.accuracy(dev, ew.DEFAULT_WEIGHTS) - 0.05
    w = result.weights
    assert all(0.0 <= v <= ew.UPPER for v in w["retriever_weights"].values())
    assert all(0.0 <= v <= ew.UPPER for v in w["metric_weights"].values())
    assert w["threshold"] == 0.1 and w["pooling"] in POOLINGS
    # the unreliable members end up weighted below the reliable one
    assert w["retriever_weights"]["Wiki@10"] > min(w["retriever_weights"]["PK"],
                                                   w["retriever_weights"]["ReFree"])
    assert train.oracle() >= result.value


def test_cache_from_results_jsonl_joins_gold_answers(tmp_path):
    from ambiqa.data import load_dataset
    from ambiqa.errors import DataError
    from ambiqa.evaluation.runner import example_id

    rows = synthetic_rows(5)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"question": r["question"], "answer": r["gold"]}) + "\n"
                            for r in rows))
    spec = f"webq:{data}"
    ids = [example_id(ex, i) for i, ex in enumerate(load_dataset(spec))]
    results = tmp_path / "results.jsonl"
    with open(results, "w") as fh:
        for id_, r in zip(ids, rows, strict=True):
            fh.write(json.dumps({"id": id_, "question": r["question"], "prediction": {
                "answer": "x", "member_answers": r["answers"],
                "similarities": r["similarities"]}}) + "\n")
        fh.write(json.dumps({"id": "err", "prediction": None, "error": "boom"}) + "\n")
        fh.write('{"id": "torn"')
    cache = ew.load_cache(results, data_spec=spec)
    assert len(cache.questions) == 5 and cache.metrics == ["em", "f1", "emb"]
    assert cache.members[0] == "Wiki@10"
    assert [r["gold"] for r in cache.questions] == [r["gold"] for r in rows]
    with pytest.raises(DataError, match="no gold answers"):
        ew.load_cache(results)


def test_collect_cache_runs_every_member_then_tunes_offline(use_lm):
    enc = HashEncoder()
    wiki = InMemoryRetriever([Passage("w1", "Paris", "Paris is the capital of France.")])
    bm25 = InMemoryRetriever([Passage("b1", "Lyon", "Lyon is a city in France.")])
    program = EoR(retriever=wiki, sources={"BM25": bm25}, pool=("Wiki@1", "BM25@1", "ReFree"),
                  encoder=enc, retriever_weights={"BM25@1": 0.05})  # BM25 normally ignored

    def reader(inp):
        p = inp["passages"]
        return {"answer": "Paris" if "Paris" in p else ("Lyon" if "Lyon" in p else "Nice")}

    lm = use_lm(scripted_lm({"ShortAnswer": reader}))
    lm.engine._signature_of("")

    class Ex:
        def __init__(self, i):
            self.id, self.question, self.answers = f"e{i}", f"capital of France {i}?", ["Paris"]

    cache = ew.collect_cache(program, [Ex(0), Ex(1)])
    assert set(cache.members) == {"Wiki@1", "BM25@1", "ReFree"}
    assert all(len(r["answers"]) == 3 for r in cache.questions)  # BM25 was run for tuning
    assert cache.member_accuracy()["Wiki@1"] == 1.0
    calls = len(lm.engine.calls)
    ew.tune_weights(cache, trials=50)
    assert len(lm.engine.calls) == calls


def test_weights_table_heatmap_and_artifact(tmp_path):
    cache = ew.Cache(synthetic_rows(40), "em")
    result = ew.tune_weights(cache, trials=100)
    rows = {"default": ew.DEFAULT_WEIGHTS, "tuned": result.weights}
    table = ew.weights_table(rows, cache.members)
    assert table.splitlines()[0].startswith("| weights | ω^s em | ω^s f1 | ω^s emb | ω^r Wiki@10")
    assert len(table.splitlines()) == 4
    png = ew.plot_weights(rows, cache.members, tmp_path / "w.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    path = ew.save_weights_artifact(tmp_path / "eor.json", result.weights, cache)
    program = ambiqa.load(path, retriever=InMemoryRetriever([Passage("a", "A", "a")]),
                          program_kwargs={"sources": {"BM25": InMemoryRetriever([])}})
    assert program.pool == tuple(cache.members)
    assert program.retriever_weights == pytest.approx(result.weights["retriever_weights"])
    assert program.pooling == result.weights["pooling"]
    cfg = ew.eor_config(result.weights)
    assert EoR(retriever=None, pool=tuple(cache.members), **cfg).metric_weights == \
        pytest.approx(result.weights["metric_weights"])


def test_cli_tune_eor(tmp_path, capsys):
    cache = ew.Cache(synthetic_rows(30), "em")
    path = tmp_path / "cache.json"
    path.write_text(json.dumps(cache.to_json()))
    dev = tmp_path / "dev.json"
    dev.write_text(json.dumps(ew.Cache(synthetic_rows(20, seed=9), "em").to_json()))
    code = main(["tune-eor", str(path), "--dev-cache", str(dev), "--trials", "200",
                 "--out", str(tmp_path / "r.json"), "--plot", str(tmp_path / "h.png"),
                 "--artifact", str(tmp_path / "eor.json")])
    assert code == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["train"]["tuned"] >= report["train"]["default"]
    assert {"default", "tuned"} <= set(report["dev"])
    assert (tmp_path / "h.png").is_file() and (tmp_path / "eor.json").is_file()
    assert main(["tune-eor", str(tmp_path / "nope.json")]) == 2


def test_empty_cache_is_a_clear_error():
    with pytest.raises(ConfigError, match="no questions"):
        ew.tune_weights(ew.Cache([], "em"), trials=5)
    assert np.all(ew.vote_batch(ew.Cache([], "em"), ew.DEFAULT_WEIGHTS) == [])
