"""Reader v3 (issue 34): new training sources, the evaluation-question guard, the device pack
round trip (pack -> benchmarks/reader_gpu_train.py -> ``ambiqa reader finish``) and the
re-scoring of stored runs."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from ambiqa.errors import ConfigError
from ambiqa.reader_training import TrainConfig, training_examples
from ambiqa.reader_training.data import (
    PassageIndex,
    ReaderExample,
    assert_no_eval_questions,
    build_ambignq_examples,
    build_ambignq_list_examples,
    drop_eval_overlap,
    evaluation_questions,
    question_key,
    statement_of,
)

ROOT = Path(__file__).resolve().parents[3]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"_t_{name}", ROOT / "benchmarks" / name)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


# --------------------------------------------------------------------------------------------
# evaluation-question guard
# --------------------------------------------------------------------------------------------


def test_question_key_ignores_case_punctuation_and_spacing() -> None:
    assert question_key("Who sang  'Hello'?") == question_key("who sang hello")
    assert question_key("When was X born?") != question_key("When was Y born?")


def test_drop_eval_overlap_checks_ambiguous_and_disambiguated_questions() -> None:
    banned = {question_key("Who wrote the song?")}
    recs = [{"id": "a", "question": "Who wrote the song?", "qa_pairs": []},
            {"id": "b", "question": "Who sang it?",
             "qa_pairs": [{"question": "who wrote the song", "short_answers": ["X"]}]},
            {"id": "c", "question": "Who sang it?",
             "qa_pairs": [{"question": "Who sang it in 1990?", "short_answers": ["Y"]}]}]
    kept, dropped = drop_eval_overlap(recs, banned)
    assert [r["id"] for r in kept] == ["c"] and dropped == 2


def test_assert_no_eval_questions_refuses_a_leak() -> None:
    ex = ReaderExample("q1", "Who wrote the song?", "X wrote it.", "X", 0, ["X"])
    assert_no_eval_questions([ex], {question_key("Who sang it?")})
    with pytest.raises(ConfigError, match="evaluation question"):
        assert_no_eval_questions([ex], {question_key("who wrote the song")})


def test_evaluation_questions_hold_asqa_dev(shared_data) -> None:
    from ambiqa.data.specs import load_dataset

    keys = evaluation_questions()
    dev = load_dataset("asqa:dev")
    assert all(question_key(p["question"]) in keys for r in dev[:20] for p in r["qa_pairs"])
    train = load_dataset("asqa:train")
    assert not any(question_key(r["question"]) in keys for r in train[:5])


def _ambignq_file(path: Path, records: list[dict]) -> str:
    path.write_text(json.dumps(records), encoding="utf-8")
    return f"ambignq:{path}"


def test_ambignq_source_drops_dev_questions_and_refuses_dev_files(shared_data, tmp_path
                                                                  ) -> None:
    from ambiqa.data.specs import load_dataset

    dev_q = load_dataset("asqa:dev")[0]["qa_pairs"][0]["question"]
    corpus = tmp_path / "passages.jsonl"
    corpus.write_text("\n".join(json.dumps(p) for p in [
        {"id": "p1", "title": "Zorblat river", "text": "The Zorblat river is 412 km long."},
        {"id": "p2", "title": "Zorblat river", "text": "The Zorblat river flows north."},
        {"id": "p3", "title": dev_q, "text": f"{dev_q} Answer: Kappa."},
    ]) + "\n", encoding="utf-8")
    spec = _ambignq_file(tmp_path / "amb_train.json", [
        {"id": "1", "question": "How long is the zorblat river?", "annotations": [
            {"type": "singleAnswer", "answer": ["412 km"]}]},
        {"id": "2", "question": "Something ambiguous?", "annotations": [
            {"type": "multipleQAs", "qaPairs": [{"question": dev_q, "answer": ["Kappa"]},
                                                 {"question": "Zorblat other?",
                                                  "answer": ["north"]}]}]},
    ])
    cfg = TrainConfig(ambignq=spec, corpus=str(corpus))
    examples, counts = training_examples(cfg, limit=3)
    assert counts["excluded_eval_overlap"][spec] == 1
    amb = [e for e in examples if e.source == "ambignq"]
    assert [e.answer for e in amb if e.answer] == ["412 km"]
    assert question_key(dev_q) not in {question_key(e.question) for e in examples}
    with pytest.raises(ConfigError, match="evaluation data"):
        training_examples(TrainConfig(ambignq="ambignq:dev"), limit=2)
    with pytest.raises(ConfigError, match="--corpus"):
        training_examples(TrainConfig(ambignq=spec), limit=2)


# --------------------------------------------------------------------------------------------
# distant supervision and interpretation lists
# --------------------------------------------------------------------------------------------


def _index() -> PassageIndex:
    return PassageIndex([
        {"title": "Simpsons", "text": "The Simpsons first aired as shorts on the Tracey Ullman "
                                      "Show on April 19, 1987."},
        {"title": "Simpsons", "text": "The Simpsons premiered as a half-hour prime time show "
                                      "on December 17, 1989."},
        {"title": "Simpsons", "text": "The Simpsons is an animated sitcom by Matt Groening."},
        {"title": "Cooking", "text": "Bread is baked in an oven."},
        {"title": "Tracey Ullman Show", "text": "The shorts on the Tracey Ullman Show were "
                                                "animated by Klasky Csupo."},
    ])


def test_ambignq_distant_supervision_positive_negative_and_sibling() -> None:
    recs = [{"id": "s", "qa_pairs": [
        {"question": "When did the Simpsons first air on the Tracey Ullman Show?",
         "short_answers": ["April 19, 1987"]},
        {"question": "When did the Simpsons first air as a half-hour prime time show?",
         "short_answers": ["December 17, 1989"]},
        {"question": "When did the bread bake?", "short_answers": ["yesterday"]}]}]
    examples, counts = build_ambignq_examples(recs, _index(), min_share=0.3)
    pos = [e for e in examples if e.answer_start is not None and "/s" not in e.qid]
    neg = [e for e in examples if e.answer_start is None]
    assert {e.answer for e in pos} == {"April 19, 1987", "December 17, 1989"}
    assert neg and all(not any(a in e.context for a in e.aliases) for e in neg)
    assert any("Klasky" in e.context for e in neg)  # on topic, without the answer
    for e in examples:  # every label points at its answer
        if e.answer_start is not None:
            assert e.context[e.answer_start:e.answer_start + len(e.answer)] == e.answer
    sib = [e for e in examples if "/s" in e.qid]
    assert counts["sibling"] == len(sib) == 2
    assert all("1987" in e.context and "1989" in e.context for e in sib)
    assert counts["no_passage"] == 1  # the bread question found no passage with its answer


def test_statement_of_and_interpretation_lists() -> None:
    assert statement_of("When did the Simpsons first air?") == "The Simpsons first air"
    assert statement_of("Who is the voice of Kaa?") == "The voice of Kaa"
    recs = [{"id": "k", "qa_pairs": [
        {"question": "Who voiced Kaa in the 1967 film?", "short_answers": ["Sterling Holloway"]},
        {"question": "Who voiced Kaa in the 2016 film?", "short_answers": ["Scarlett Johansson"]},
    ]}, {"id": "one", "qa_pairs": [{"question": "Q?", "short_answers": ["A"]}]}]
    examples, counts = build_ambignq_list_examples(recs, removed_negatives=1.0)
    assert counts == {"questions": 1, "answerable": 2, "no_answer": 2}
    ans = [e for e in examples if e.answer_start is not None]
    assert {e.answer for e in ans} == {"Sterling Holloway", "Scarlett Johansson"}
    assert all("Voiced Kaa in the 1967 film: Sterling Holloway." in e.context for e in ans)
    for e in examples:
        if e.answer_start is None:
            assert not any(a in e.context for a in e.aliases)


# --------------------------------------------------------------------------------------------
# device pack round trip (on the CPU)
# --------------------------------------------------------------------------------------------


def test_pack_train_finish_round_trip(shared_data, tmp_path, monkeypatch) -> None:
    from ambiqa.evaluation.extractive import ExtractiveReader
    from ambiqa.reader_training import finish_from_device, pack_for_device

    monkeypatch.setenv("AMBIQA_CACHE", str(tmp_path / "cache"))
    pack = tmp_path / "pack"
    cfg = TrainConfig(holdout=2, batch_size=4, max_length=128, doc_stride=32)
    meta = pack_for_device(pack, config=cfg, limit=6, log=lambda m: None)
    assert meta["windows"] > 0 and meta["holdout_examples"] > 0
    assert meta["sources"] == ["long_answers"]
    with pytest.raises(ConfigError, match="holdout"):
        pack_for_device(tmp_path / "p2", config=TrainConfig(), limit=2)
    gpu = _script("reader_gpu_train.py")
    out = tmp_path / "device_out"
    state = tmp_path / "state"
    assert gpu.main([str(pack), str(out), "--runs", "lr=1e-4,epochs=2,name=t",
                     "--max-steps", "2", "--state", str(state), "--device", "cpu"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    run = summary["runs"][0]
    assert run["steps"] == 2 and run["best_epoch"] == 1 and run["shards"]
    assert all((out / s).stat().st_size <= gpu.SHARD_BYTES for s in run["shards"])
    # a rerun resumes from the saved state instead of training again
    assert gpu.main([str(pack), str(tmp_path / "again"), "--runs", "lr=1e-4,epochs=2,name=t",
                     "--max-steps", "2", "--state", str(state), "--device", "cpu"]) == 0
    assert "resuming at step 2/2" in (tmp_path / "again" / "train_log.txt").read_text()
    reader_dir = tmp_path / "readers" / "tiny-dev"
    manifest = finish_from_device(reader_dir, [out / s for s in run["shards"]], pack=pack,
                                  run=run, log=lambda m: None)
    assert manifest["trained_on"]["chosen_epoch"] == 1
    assert manifest["calibration"]["n"] == meta["holdout_examples"]
    reader = ExtractiveReader(reader_dir)
    assert isinstance(reader.answer("Who wrote it?", "It was written by Ann Lee."), str)
    # the same through the CLI: `ambiqa reader finish` picks the run, then recalibrates
    from ambiqa.cli import main as cli

    cli_dir = tmp_path / "readers" / "tiny-cli"
    assert cli(["reader", "finish", str(out), "--pack", str(pack), "--out", str(cli_dir),
                "--no-validate"]) == 0
    assert cli(["reader", "calibrate", str(cli_dir), "--on-holdout", "--no-validate"]) == 0
    cal = json.loads((cli_dir / "reader_manifest.json").read_text())["calibration"]
    assert "held-out" in cal["sources"]
    assert cli(["reader", "finish", str(out), "--pack", str(pack), "--run", "nope",
                "--out", str(tmp_path / "x")]) == 2


# --------------------------------------------------------------------------------------------
# re-scoring stored runs
# --------------------------------------------------------------------------------------------


def test_rescore_pairs_and_rows_keep_the_old_score() -> None:
    rs = _script("reader_rescore.py")
    runs = ["asqa/closed_book", "asqa/diva", "asqa/vanilla_rag",
            "asqa-compiled/diva-knn", "asqa-compiled/vanilla_rag-knn"]
    pairs = rs.run_pairs(runs)
    assert ("asqa/diva", "asqa/closed_book") in pairs
    assert ("asqa/diva", "asqa/vanilla_rag") in pairs
    assert ("asqa-compiled/diva-knn", "asqa/diva") in pairs
    assert ("asqa-compiled/diva-knn", "asqa-compiled/vanilla_rag-knn") in pairs
    assert ("asqa-compiled/vanilla_rag-knn", "asqa/vanilla_rag") in pairs

    class Reader:
        def answer(self, question: str, context: str) -> str:
            return "1987" if "1987" in context else ""

    class Ex:
        qa_pairs = [{"question": "When?", "short_answers": ["1987"]},
                    {"question": "When else?", "short_answers": ["1989"]}]

    rows = [{"id": "q", "error": None, "prediction": {"answer": "It was 1987."},
             "metrics": {"d-f1": 0.0, "rouge-l": 0.25, "dr_q": 0.0}},
            {"id": "q", "error": "boom", "prediction": {}, "metrics": {}}]
    new = rs.rescore_rows(rows, {"q": Ex()}, Reader(), {})
    assert new[0]["metrics"]["d-f1"] == 0.5 and new[0]["metrics"]["d-f1 (old)"] == 0.0
    assert new[0]["metrics"]["dr_q"] == pytest.approx((0.5 * 0.25) ** 0.5)
    assert new[1] == rows[1] and rows[0]["metrics"]["d-f1"] == 0.0  # input untouched
    assert rs._old_rows(new)[0]["metrics"]["d-f1"] == 0.0


def test_lm_reader_yardstick_counts_cost_and_resumes(shared_data, tmp_path, monkeypatch
                                                     ) -> None:
    import ambiqa
    from ambiqa.testing import scripted_lm

    def read(inputs):  # copies the context's last word: a weak but real reader
        return {"answer": str(inputs["context"]).split()[-1].strip(".")}

    lm = scripted_lm({"ReadShortAnswer": read})
    monkeypatch.setattr(ambiqa, "make_lm", lambda spec=None, **kw: lm)
    mod = _script("reader_lm_ceiling.py")
    out = tmp_path / "lm-reader"
    # no extractive reader on a fresh machine: the paired comparison is skipped, said why
    missing = str(tmp_path / "no-reader")
    assert mod.main(["--lm", "fake", "--n", "2", "--out", str(out), "--against", missing]) == 0
    res = json.loads(out.with_suffix(".json").read_text())
    assert res["n"] == 2 and res["lm_calls_per_question"] > 0
    assert "not found" in res["against"]["skipped"]
    assert 0.0 <= res["d_f1"]["mean"] <= 1.0
    calls = lm.engine.count
    assert mod.main(["--lm", "fake", "--n", "2", "--out", str(out)]) == 0  # resumed: no call
    assert lm.engine.count == calls
