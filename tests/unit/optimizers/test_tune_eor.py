"""EoR voter-weight tuning over cached answers: exact vote, zero LM calls, outputs."""

from __future__ import annotations

import functools
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
from ambiqa.testing import HashEncoder as _HashEncoder
from ambiqa.testing import answer_words, scripted_lm
from ambiqa.tracing import track
from ambiqa.types import Passage

MEMBERS = ["Wiki@10", "Wiki@RR@5", "BM25@5", "PK", "ReFree"]
# chance that a member answers right; PK and ReFree agree on the same wrong answer often
SKILL = {"Wiki@10": 0.8, "Wiki@RR@5": 0.6, "BM25@5": 0.5, "PK": 0.1, "ReFree": 0.1}



# Bag-of-words unit vectors over answer-normalised tokens, as in test_optim_compile.
HashEncoder = functools.partial(_HashEncoder, 64, tokenize=answer_words)

def synthetic_rows(n: int, seed: int = 0, drop: float = 0.1, prefix: str = "q") -> list[dict]:
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
        rows.append({"id": f"{prefix}{i}", "question": f"{prefix}{i}?", "gold": [gold],
                     "answers": answers, "similarities": sims})
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
    dev = ew.Cache(synthetic_rows(80, seed=3, prefix="d"), "em")
    lm = scripted_lm({}, default=AssertionError("the LM must not be called"))
    with dspy.context(lm=lm), track() as trace:
        result = ew.tune_weights(train, trials=1000, seed=0)
    assert trace.lm_calls == 0 and not lm.engine.calls
    assert result.trials == 1000 and result.ran == 1000 and result.trials_per_s > 50
    # The default weights are the study's first trial, so "tuned >= default" would hold even
    # if the search did nothing. On this data PK and ReFree often agree on one wrong answer
    # and outvote the right one under equal weights (~0.75 EM); a working search finds a
    # later trial that down-weights them (~0.93) and the gain carries to unseen questions.
    default = ew.accuracy(train, ew.DEFAULT_WEIGHTS)
    assert default < 0.8
    assert result.best_trial != 0 and result.value >= default + 0.1
    assert result.value == pytest.approx(ew.accuracy(train, result.weights))
    assert ew.accuracy(dev, result.weights) >= ew.accuracy(dev, ew.DEFAULT_WEIGHTS) + 0.1
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
    from ambiqa.evaluation.runs.runner import example_id

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
    dev.write_text(json.dumps(ew.Cache(synthetic_rows(20, seed=9, prefix="d"), "em").to_json()))
    code = main(["tune-eor", str(path), "--dev-cache", str(dev), "--trials", "200",
                 "--out", str(tmp_path / "r.json"), "--plot", str(tmp_path / "h.png"),
                 "--artifact", str(tmp_path / "eor.json")])
    assert code == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["objective"] == "f1"  # the default objective is token F1
    assert report["train"]["tuned"] >= report["train"]["default"] + 0.05
    assert report["best_trial"] != 0 and report["trials"] == 200
    assert {"default", "tuned"} <= set(report["dev"])
    assert (tmp_path / "h.png").is_file() and (tmp_path / "eor.json").is_file()
    assert main(["tune-eor", str(tmp_path / "nope.json")]) == 2


def test_empty_cache_is_a_clear_error():
    with pytest.raises(ConfigError, match="no questions"):
        ew.tune_weights(ew.Cache([], "em"), trials=5)
    assert np.all(ew.vote_batch(ew.Cache([], "em"), ew.DEFAULT_WEIGHTS) == [])


def _cache_file(tmp_path, name, rows, data_spec):
    path = tmp_path / name
    path.write_text(json.dumps({**ew.Cache(rows, "f1").to_json(), "data_spec": data_spec}))
    return path


def test_tune_eor_refuses_a_dev_cache_without_the_research_flag(tmp_path, capsys, caplog):
    import logging

    from ambiqa.optimizers.artifact import read_artifact

    dev = _cache_file(tmp_path, "dev.json", synthetic_rows(20), "webq:dev")
    with pytest.raises(ConfigError, match="'webq:dev' is not a training split"):
        ew.tune_weights(ew.load_cache(dev), trials=5)
    assert main(["tune-eor", str(dev), "--trials", "5"]) == 2
    assert "webq:dev' is not a training split" in capsys.readouterr().err
    # overlapping ids between a training cache and the dev cache are refused too
    train = _cache_file(tmp_path, "train.json", synthetic_rows(20), "webq:train")
    assert main(["tune-eor", str(train), "--dev-cache", str(dev), "--trials", "5"]) == 2
    assert "20 question id(s) are in both" in capsys.readouterr().err
    # with the flag it runs, and the artifact says so loudly, also when loaded
    art = tmp_path / "eor.json"
    assert main(["tune-eor", str(dev), "--trials", "5", "--allow-eval-splits",
                 "--artifact", str(art)]) == 0
    guard = read_artifact(art)["manifest"]["data_guard"]
    assert guard["allow_eval_splits"] is True
    assert guard["violations"] == ["'webq:dev' is not a training split"]
    with caplog.at_level(logging.WARNING):
        ambiqa.load(art, retriever=InMemoryRetriever([Passage("a", "A", "a")]),
                    program_kwargs={"sources": {"BM25": InMemoryRetriever([])}})
    assert "OPTIMIZED ON EVALUATION DATA" in caplog.text


def test_a_study_refuses_to_resume_on_another_cache_and_tops_up(tmp_path):
    storage = f"sqlite:///{tmp_path}/eor.db"
    a = ew.Cache(synthetic_rows(30, seed=1), "f1", data_spec="webq:train")
    first = ew.tune_weights(a, trials=20, study="s", storage=storage, sampler="random")
    assert (first.trials, first.ran) == (20, 20)
    more = ew.tune_weights(a, trials=35, study="s", storage=storage, sampler="random")
    assert (more.trials, more.ran) == (35, 15)  # a rerun tops up to --trials in total
    again = ew.tune_weights(a, trials=35, study="s", storage=storage, sampler="random")
    assert (again.trials, again.ran) == (35, 0) and again.weights == more.weights
    b = ew.Cache(synthetic_rows(30, seed=2), "f1", data_spec="webq:train")
    with pytest.raises(ConfigError, match="another cache.*cache_fingerprint"):
        ew.tune_weights(b, trials=40, study="s", storage=storage)
    c = ew.Cache(synthetic_rows(30, seed=1), "f1", data_spec="webq:train:30")
    with pytest.raises(ConfigError, match="data_spec: study has 'webq:train'"):
        ew.tune_weights(c, trials=40, study="s", storage=storage)
    with pytest.raises(ConfigError, match="search space differs"):
        ew.tune_weights(a, trials=40, study="s", storage=storage, tune_threshold=True)


def test_results_jsonl_is_read_through_the_results_reader(tmp_path):
    rows = synthetic_rows(4)
    results = tmp_path / "results.jsonl"
    (tmp_path / "run.json").write_text(json.dumps({
        "program": "eor", "data": "webq:train:4", "metrics": ["f1"], "lm": "openai/fake",
        "reader": None, "index": "bm25:wiki", "program_config": {"rerank_depth": 7}}))

    def line(r, answers=None, error=None):
        pred = None if error else {"answer": "x", "member_answers": answers or r["answers"],
                                   "similarities": r["similarities"]}
        return json.dumps({"id": r["id"], "question": r["question"], "gold": r["gold"],
                           "prediction": pred, **({"error": error} if error else {})}) + "\n"

    stale = dict(rows[1]["answers"], **{"Wiki@10": "stale"})
    body = (line(rows[0]) + line(rows[1], answers=stale) + line(rows[2]) + line(rows[1])
            + line(rows[3], error="timeout") + line(rows[2], error="boom"))
    # A corrupt line in the middle is refused with its number (issue 33: never a silent n-1).
    results.write_text(line(rows[0]) + "not json\n" + body)
    with pytest.raises(Exception, match="line 2"):
        ew.load_cache(results)
    # A torn last line (a killed run) is tolerated and counted.
    results.write_text(body + '{"id": "torn"')
    cache = ew.load_cache(results)
    # q1: the later row wins; q2 and q3: last row is an error, dropped
    assert cache.ids() == ["q0", "q1"]
    assert cache.questions[1]["answers"] == rows[1]["answers"]
    assert cache.stats == {"malformed_lines": 1, "error_rows": 2, "no_member_answers": 0}
    assert cache.gold_metric == "f1" and cache.data_spec == "webq:train:4"
    assert cache.meta["rerank_depth"] == 7 and cache.meta["lm"] == "openai/fake"
    with pytest.raises(Exception, match="differs from the run's data"):
        ew.load_cache(results, data_spec="webq:dev")


def test_load_refuses_weights_for_another_pool(tmp_path):
    from ambiqa.errors import ArtifactError
    from ambiqa.optimizers.artifact import read_artifact

    wiki = InMemoryRetriever([Passage("w1", "Paris", "Paris is the capital of France.")])
    bm25 = InMemoryRetriever([Passage("b1", "Lyon", "Lyon is a city in France.")])
    other = InMemoryRetriever([Passage("o1", "Nice", "Nice is in France.")])
    cache = ew.Cache(synthetic_rows(20), "f1", data_spec="webq:train",
                     meta={"pool": MEMBERS, "rerank_depth": 5, "lm": "openai/fake",
                           "sources": {"Wiki": {"fingerprint": wiki.fingerprint},
                                       "BM25": {"fingerprint": bm25.fingerprint}}})
    result = ew.tune_weights(cache, trials=10)
    path = ew.save_weights_artifact(tmp_path / "eor.json", result.weights, cache)
    opt = read_artifact(path)["manifest"]["optimizer"]
    assert opt["pool"] == MEMBERS and opt["rerank_depth"] == 5 and opt["reader_lm"] == \
        "openai/fake" and set(opt["sources"]) == {"Wiki", "BM25"}
    program = ambiqa.load(path, retriever=wiki, program_kwargs={"sources": {"BM25": bm25}})
    assert program.pool == tuple(MEMBERS) and program.rerank_depth == 5
    with pytest.raises(ArtifactError, match="source BM25 is index .* a different pool member"):
        ambiqa.load(path, retriever=wiki, program_kwargs={"sources": {"BM25": other}})
    with pytest.raises(ArtifactError, match="source.*BM25, which were not given"):
        ambiqa.load(path, retriever=wiki)
    doc = json.loads(path.read_text())
    doc["manifest"]["program_config"]["pool"] = ["Wiki@10", "PK"]
    doc["manifest"]["program_config"]["retriever_weights"] = {}
    path.write_text(json.dumps(doc))
    with pytest.raises(ArtifactError, match="tuned on pool"):
        ambiqa.load(path, retriever=wiki, program_kwargs={"sources": {"BM25": bm25}})


def test_api_tune_eor_takes_keywords_and_returns_the_weights_it_wrote(tmp_path):
    """``ambiqa.tune_eor`` is the verb the CLI and compare_methods call."""
    from ambiqa.optimizers.artifact import read_artifact

    path = tmp_path / "cache.json"
    path.write_text(json.dumps(ew.Cache(synthetic_rows(30), "em").to_json()))
    result = ambiqa.tune_eor(path, trials=100, artifact=tmp_path / "eor.json",
                                 out=tmp_path / "r.json")
    assert [p.name for p in result.written] == ["r.json", "eor.json"]
    assert result.n_train == 30 and result.report["trials"] == 100
    assert result.report["train"]["tuned"] >= result.report["train"]["default"]
    assert json.loads((tmp_path / "r.json").read_text())["weights"] == result.weights
    config = read_artifact(tmp_path / "eor.json")["manifest"]["program_config"]
    assert config["metric_weights"] == pytest.approx(result.weights["metric_weights"])
    assert "ω^r" in result.table
    with pytest.raises(ConfigError, match="no question"):
        empty = tmp_path / "empty.json"
        empty.write_text(json.dumps(ew.Cache([], "em").to_json()))
        ambiqa.tune_eor(empty, trials=5)
