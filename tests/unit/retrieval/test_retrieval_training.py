"""ColBERT training data and the training driver's pure parts (no model is trained here; the
few-step training run is tests/integration/test_colbert_training.py)."""

from __future__ import annotations

import json

import pytest

from ambiqa.errors import ConfigError, DataError
from ambiqa.retrieval import training as tr
from ambiqa.retrieval.triples import (
    build_training_data,
    colbert_text,
    load_training_data,
    save_training_data,
)
from ambiqa.types import Passage

CORPUS = [
    Passage("c1", "Eiffel Tower", "The Eiffel Tower was completed in 1889 in Paris."),
    Passage("c2", "Louvre", "The Louvre opened in 1793 and is the largest art museum."),
    Passage("c3", "Tower Bridge", "Tower Bridge in London was completed in 1894."),
    Passage("c4", "Big Ben", "Big Ben is the nickname of the Great Bell, finished 1859."),
    Passage("c5", "Colosseum", "The Colosseum in Rome was completed in 80 AD."),
    Passage("c6", "Taj Mahal", "The Taj Mahal was completed around 1653 in Agra."),
]


def _asqa(tmp_path):
    rows = [{
        "ambiguous_question": "When was the tower completed?",
        "qa_pairs": [
            {"question": "When was the Eiffel Tower completed?", "short_answers": ["1889"]},
            {"question": "When was Tower Bridge completed?", "short_answers": ["1894"]},
        ],
        "annotations": [{"long_answer": "1889 or 1894.", "knowledge": []}],
        "passages": [
            {"content": "Eiffel Tower\n\nThe Eiffel Tower was completed in 1889 in Paris.",
             "wikipage": "Eiffel Tower"},
            {"content": "Tower Bridge\n\nTower Bridge in London was completed in 1894.",
             "wikipage": "Tower Bridge"},
            {"content": "Some Tower\n\nAn unrelated tower that no answer mentions.",
             "wikipage": "Some Tower"},
        ],
    }]
    path = tmp_path / "asqa_train.json"
    path.write_text(json.dumps(rows))
    return f"asqa:{path}"


def _hotpot(tmp_path):
    rows = [{"_id": "h1", "question": "Which opened first, the Louvre or the Colosseum?",
             "answer": "Colosseum", "supporting_facts": [["Louvre", 0], ["Colosseum", 0]],
             "context": [["Louvre", ["The Louvre opened in 1793 and is the largest art "
                                     "museum."]],
                         ["Colosseum", ["The Colosseum in Rome was completed in 80 AD."]],
                         ["Pantheon", ["A temple not in the corpus."]]],
             "type": "comparison", "level": "easy"}]
    path = tmp_path / "hotpot_train.json"
    path.write_text(json.dumps(rows))
    return f"hotpotqa:{path}"


def test_triples_use_answer_bearing_positives_and_safe_negatives(tmp_path):
    data = build_training_data(CORPUS, [_asqa(tmp_path), _hotpot(tmp_path)],
                               negatives_per_positive=2, random_share=0.5)
    s = data.stats
    assert s["queries"] == 4  # ambiguous question + 2 disambiguations + HotpotQA question
    by_q = {}
    for q, pos, neg in data.triples:
        by_q.setdefault(data.queries[q], []).append((data.collection[pos],
                                                     data.collection[neg]))
        assert pos != neg
    eiffel = by_q["When was the Eiffel Tower completed?"]
    assert {p for p, _ in eiffel} == {colbert_text("Eiffel Tower", CORPUS[0].text)}
    assert all("1889" not in n for _, n in eiffel)  # a negative never holds the answer
    amb = by_q["When was the tower completed?"]
    assert {p for p, _ in amb} == {colbert_text("Eiffel Tower", CORPUS[0].text),
                                   colbert_text("Tower Bridge", CORPUS[2].text)}
    assert all("unrelated tower" not in p for p, _ in amb)  # no answer in it: not a positive
    assert all("1889" not in n and "1894" not in n for _, n in amb)
    assert s["positives_in_corpus"] == 6 and s["positives_added_from_train_text"] == 0
    assert len(data.triples) == 2 * 6
    assert data.fingerprint() == build_training_data(
        CORPUS, [_asqa(tmp_path), _hotpot(tmp_path)], negatives_per_positive=2,
        random_share=0.5).fingerprint()  # deterministic


def test_positives_missing_from_the_corpus_come_from_the_train_text(tmp_path):
    data = build_training_data(CORPUS[:3], [_hotpot(tmp_path)], negatives_per_positive=1)
    assert data.stats["positives_added_from_train_text"] == 1  # the Colosseum paragraph
    assert any("Colosseum" in c for c in data.collection)


def test_evaluation_splits_are_refused(tmp_path):
    dev = tmp_path / "dev.json"
    dev.write_text("[]")
    with pytest.raises(ConfigError, match="not a training split"):
        build_training_data(CORPUS, [f"asqa:{dev}"])
    with pytest.raises(ConfigError, match="not a training split"):
        build_training_data(CORPUS, ["nq:oracle"])
    with pytest.raises(DataError):
        build_training_data(CORPUS[:1], [_hotpot(tmp_path)])


def test_holdout_keeps_validation_queries_out_of_the_triples(tmp_path):
    with pytest.raises(DataError, match="no training queries"):  # everything held out
        build_training_data(CORPUS, [_asqa(tmp_path), _hotpot(tmp_path)], holdout=1.0)
    for seed in range(40):
        try:
            data = build_training_data(CORPUS, [_asqa(tmp_path), _hotpot(tmp_path)],
                                       holdout=0.5, seed=seed)
        except DataError:  # this seed held out both examples
            continue
        if data.validation:
            break
    held = {v["query"] for v in data.validation}
    assert held and not held & set(data.queries)
    assert all(v["positives"] for v in data.validation)


def test_training_data_round_trips_as_json(tmp_path):
    data = build_training_data(CORPUS, [_asqa(tmp_path)], negatives_per_positive=1)
    save_training_data(data, tmp_path / "work")
    back = load_training_data(tmp_path / "work")
    assert back.triples == data.triples and back.queries == data.queries
    assert back.fingerprint() == data.fingerprint()
    (tmp_path / "work" / "triples.jsonl").write_text("[0, 0, 999]\n")
    with pytest.raises(DataError, match="outside"):
        load_training_data(tmp_path / "work")


def test_ordered_triples_cycle_through_shuffled_epochs(tmp_path):
    data = build_training_data(CORPUS, [_asqa(tmp_path)], negatives_per_positive=1)
    n = len(data.triples)
    out = tr.ordered_triples(data, steps=3, bsize=n, seed=0)
    assert len(out) == 3 * n
    assert sorted(map(tuple, out[:n])) == sorted(map(tuple, data.triples))
    assert out == tr.ordered_triples(data, steps=3, bsize=n, seed=0)


@pytest.mark.parametrize("kwargs, match", [
    ({"dim": 512}, "dim"), ({"steps": 0}, "steps"), ({"bsize": 1}, "bsize"),
    ({"lr": 0.0}, "lr"), ({"save_every": 0}, "save_every"),
])
def test_bad_training_options(tmp_path, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        tr.train_colbert(tmp_path / "out", **kwargs)


def test_training_refuses_to_write_into_a_repository(tmp_path):
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    with pytest.raises(ConfigError, match="repository"):
        tr.train_colbert(tmp_path / "repo" / "ckpt", steps=1)
    with pytest.raises(ConfigError, match="needs a corpus"):  # a dot-dir inside is fine
        tr.train_colbert(tmp_path / "repo" / ".cache" / "ckpt", steps=1)


def test_changed_settings_do_not_silently_resume(tmp_path, monkeypatch):
    data = build_training_data(CORPUS, [_asqa(tmp_path)], negatives_per_positive=1)
    work = tmp_path / "out.work"
    save_training_data(data, work)
    state = {"settings": tr._settings(384, 10, 2, 1e-5, 2, 180, 32, True, 0,
                                      data.fingerprint()), "steps_done": 4}
    (work / tr.STATE).write_text(json.dumps(state))
    with pytest.raises(ConfigError, match="other settings") as err:
        tr.train_colbert(tmp_path / "out", steps=10, bsize=2, lr=3e-5)
    assert "lr" in err.value.message and "--fresh" in err.value.hint


# ---- dense-mined negatives, teacher scores, weak labels --------------------------------------
class _BagOfWords:
    """A deterministic stand-in for the MiniLM encoder: unit bag-of-words vectors."""

    def __init__(self, vocab):
        self.vocab = {w: i for i, w in enumerate(sorted(vocab))}

    def encode(self, texts, batch_size=64):
        import numpy as np

        out = np.zeros((len(texts), len(self.vocab)), dtype=np.float32)
        for r, t in enumerate(texts):
            for w in t.lower().replace("?", " ").replace(".", " ").replace(",", " ").split():
                if w in self.vocab:
                    out[r, self.vocab[w]] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


class _FakeDense:
    name = "dense"

    def __init__(self, corpus, extra_words=()):
        words = {w for p in corpus for w in p.render().lower().replace(".", " ").split()}
        self.encoder = _BagOfWords(words | set(extra_words))
        self.passages = list(reversed(corpus))  # index order need not be corpus order
        self.embeddings = self.encoder.encode([p.render() for p in self.passages])


def _webq(tmp_path, rows):
    path = tmp_path / "webq_train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"webq:{path}"


def test_nway_examples_mix_bm25_and_dense_negatives_with_teacher_scores(tmp_path):
    dense = _FakeDense(CORPUS)
    data = build_training_data(CORPUS, [_asqa(tmp_path)], nway=4, dense=dense, teacher=True,
                               negatives_per_positive=2, random_share=0.0)
    assert data.nway == 4 and all(len(ex) == 5 for ex in data.triples)
    assert data.stats["dense_negatives"] > 0 and data.stats["bm25_negatives"] > 0
    assert len(data.scores) == len(data.triples)
    for ex, sc in zip(data.triples, data.scores, strict=True):
        assert len(set(ex[1:])) == 4  # no passage twice in one example
        q = dense.encoder.encode([data.queries[ex[0]]])[0]
        for cidx, s in zip(ex[1:], sc, strict=True):
            title, _, text = data.collection[cidx].partition(" | ")
            want = float(q @ dense.encoder.encode([Passage("", title, text).render()])[0])
            assert s == pytest.approx(want, abs=1e-4)
    save_training_data(data, tmp_path / "work")
    back = load_training_data(tmp_path / "work")
    assert back.scores == data.scores and back.fingerprint() == data.fingerprint()
    (tmp_path / "work" / "scores.jsonl").write_text("[0.5]\n")
    with pytest.raises(DataError, match="does not match"):
        load_training_data(tmp_path / "work")


def test_teacher_needs_the_dense_retriever(tmp_path):
    with pytest.raises(ConfigError, match="dense"):
        build_training_data(CORPUS, [_asqa(tmp_path)], teacher=True)
    with pytest.raises(ConfigError, match="nway"):
        build_training_data(CORPUS, [_asqa(tmp_path)], nway=1)


def test_weak_positives_must_contain_an_answer_and_rank_high(tmp_path):
    spec = _webq(tmp_path, [
        {"id": "w1", "question": "where is the louvre art museum?", "answer": ["1793"]},
        {"id": "w2", "question": "what is the capital of mars?", "answer": ["Olympus City"]},
        {"id": "w3", "question": "what number is it?", "answer": ["1"]},  # too short a label
    ])
    data = build_training_data(CORPUS, [spec], dense=_FakeDense(CORPUS), nway=3)
    assert data.queries == ["where is the louvre art museum?"]
    assert data.stats["weak_positives"] == 1 and data.stats["weak_queries_dropped"] == 2
    assert {data.collection[ex[1]] for ex in data.triples} == {
        colbert_text("Louvre", CORPUS[1].text)}


def test_distilled_examples_carry_passage_score_pairs(tmp_path):
    data = build_training_data(CORPUS, [_asqa(tmp_path)], nway=3, dense=_FakeDense(CORPUS),
                               teacher=True, negatives_per_positive=1)
    out = tr.ordered_triples(data, steps=1, bsize=len(data.triples), seed=0, distill=True)
    by_example = {tuple(ex): sc for ex, sc in zip(data.triples, data.scores, strict=True)}
    for row in out:
        ex = (row[0], *(p for p, _ in row[1:]))
        assert [s for _, s in row[1:]] == by_example[ex]
    plain = build_training_data(CORPUS, [_asqa(tmp_path)], negatives_per_positive=1)
    with pytest.raises(ConfigError, match="teacher"):
        tr.ordered_triples(plain, steps=1, bsize=2, seed=0, distill=True)


def test_distillation_needs_a_teacher(tmp_path):
    with pytest.raises(ConfigError, match="teacher"):
        tr.train_colbert(tmp_path / "out", steps=1, distill=True, corpus="x.jsonl")


# ---- the checkpoint manifest -----------------------------------------------------------------
def test_finished_checkpoint_manifest_records_training_and_query_fit(tmp_path):
    from ambiqa.retrieval.checkpoint import INFO_FILE, checkpoint_info

    data = build_training_data(CORPUS, [_asqa(tmp_path)], nway=3, dense=_FakeDense(CORPUS),
                               teacher=True, negatives_per_positive=1)
    last = tmp_path / "out.work" / "last"
    last.mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "vocab.txt"):
        (last / name).write_text("x")
    (last / "artifact.metadata").write_text(json.dumps({"dim": 128, "checkpoint": str(last)}))
    (last / "optimizer.safetensors").write_text("moments")
    (last / INFO_FILE).write_text(json.dumps({
        "kind": "trained", "name": "x", "dim": 128, "query_maxlen": 32, "query_fit": True,
        "weights_sha256": "ab" * 32}))
    settings = tr._settings(128, 5, 2, 1e-5, 3, 180, 32, True, 0, data.fingerprint(), 20.0)
    out = tr._finish(last, tmp_path / "ckpt-128", settings, data,
                     {"steps_done": 5, "train_seconds": 12.5, "losses": [1.0, 0.5]})
    info = json.loads((out / INFO_FILE).read_text())
    assert info["name"] == "ckpt-128" and info["dim"] == 128 and info["query_fit"] is True
    t = info["training"]
    assert t["nway"] == 3 and t["distillation_alpha"] == 20.0 and t["steps_done"] == 5
    assert t["triples"]["teacher"] == "dense" and t["triples"]["miners"] == ["bm25", "dense"]
    assert t["final_loss_mean_last_20"] == 0.75
    assert json.loads((out / "artifact.metadata").read_text())["checkpoint"] == str(out)
    assert not (out / "optimizer.safetensors").exists()  # resumable state stays in .work
    assert checkpoint_info(out)["id"] == "ckpt-128@" + "ab" * 6


def test_default_checkpoint_prefers_the_measured_best_trained_one(tmp_path, monkeypatch):
    from ambiqa.retrieval import checkpoint as ck
    from ambiqa.retrieval.checkpoint import INFO_FILE, REQUIRED_FILES, default_checkpoint

    assert ck.DEFAULT_TRAINED_NAMES[0] == "minilm-trained-384"  # the measured best
    DEFAULT_TRAINED_NAMES = ("ckpt-best", "ckpt-second")
    monkeypatch.setattr(ck, "DEFAULT_TRAINED_NAMES", DEFAULT_TRAINED_NAMES)

    def make(name, complete=True):
        d = tmp_path / name
        d.mkdir()
        for f in (*REQUIRED_FILES, INFO_FILE)[: None if complete else 2]:
            (d / f).write_text("{}")
        return d

    make(DEFAULT_TRAINED_NAMES[1])
    assert default_checkpoint(tmp_path) == tmp_path / DEFAULT_TRAINED_NAMES[1]
    make(DEFAULT_TRAINED_NAMES[0], complete=False)  # an unfinished one is skipped
    assert default_checkpoint(tmp_path) == tmp_path / DEFAULT_TRAINED_NAMES[1]
    for f in (*REQUIRED_FILES, INFO_FILE):
        (tmp_path / DEFAULT_TRAINED_NAMES[0] / f).write_text("{}")
    assert default_checkpoint(tmp_path) == tmp_path / DEFAULT_TRAINED_NAMES[0]


def test_cpu_training_substitutes_colbert_internals_and_restores_them():
    """The three substitutions are in force inside the block only; the optimizer restore
    runs once per AdamW built (a resumed run's moments)."""
    pytest.importorskip("colbert")
    import torch

    from ambiqa.retrieval.colbert import import_colbert
    from ambiqa.retrieval.colbert.patches import cpu_training

    import_colbert()
    from colbert.training import training as ct

    before = (torch.nn.parallel.DistributedDataParallel, ct.manage_checkpoints, ct.AdamW,
              ct.print_progress)
    restored: list[object] = []

    def hook(*args, **kwargs):
        return None

    def record(scores):
        return None

    with cpu_training(hook, record, restored.append):
        assert ct.manage_checkpoints is hook and ct.print_progress is record
        layer = torch.nn.Linear(2, 2)
        wrapped = torch.nn.parallel.DistributedDataParallel(layer, device_ids=None)
        assert wrapped.module is layer
        x = torch.ones(1, 2)
        assert torch.equal(wrapped(x), layer(x))
        opt = ct.AdamW(layer.parameters(), lr=0.1)
        assert restored == [opt] and isinstance(opt, before[2])
    assert (torch.nn.parallel.DistributedDataParallel, ct.manage_checkpoints, ct.AdamW,
            ct.print_progress) == before


def test_training_refuses_to_write_into_a_git_checkout(tmp_path):
    import subprocess

    from ambiqa.retrieval.training import train_colbert

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    with pytest.raises(ConfigError, match="ColBERT checkpoint inside the git repository"):
        train_colbert(out=repo / "ckpt")
    assert not (repo / "ckpt.work").exists()
