"""Data layer: loaders on the real shared files, malformed inputs, specs, corpus, demo set."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ambiqa.data import (
    DATASETS,
    corpus_fingerprint,
    demo_corpus_path,
    demo_questions_path,
    is_training_split,
    iter_corpus,
    load_2wikimultihopqa,
    load_ambignq,
    load_asqa,
    load_corpus,
    load_dataset,
    load_hotpotqa,
    load_nq,
    load_situatedqa,
    load_triviaqa,
    load_webq,
    parse_spec,
)
from ambiqa.errors import ConfigError, DataError


def _write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _pair_list(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(p, dict) and isinstance(p["question"], str) and p["question"]
        and isinstance(p["short_answers"], list)
        and all(isinstance(a, str) for a in p["short_answers"]) for p in value)


def _str_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v for v in value)


def _common(examples, n: int) -> None:
    assert len(examples) == n
    assert len({ex.id for ex in examples}) == n  # ids unique within a split
    for ex in examples:
        assert set(ex.inputs().keys()) == {"question"}
        assert isinstance(ex.question, str) and ex.question.strip()
        assert _str_list(ex.answers)


# ---------------------------------------------------------------------------------------------
# real shared files: counts from data/README.md and field shapes


@pytest.mark.parametrize("spec,count", [
    ("asqa:train", 500), ("asqa:dev", 200), ("ambignq:train_light", 10_036),
    ("situatedqa:temp.train", 6_009), ("situatedqa:temp.dev", 3_423),
    ("situatedqa:geo.train", 3_548), ("situatedqa:geo.dev", 1_398),
    ("hotpotqa:dev", 150), ("hotpotqa:train", 100), ("nq:oracle", 1_000),
    ("webq:train", 3_478), ("webq:dev", 300),
])
def test_shared_split_counts(shared_data, spec, count):
    _common(load_dataset(spec, data_root=shared_data), count)


def test_asqa_fields(shared_data):
    for spec in ("asqa:train", "asqa:dev"):
        examples = load_dataset(spec, data_root=shared_data)
        for ex in examples:
            assert _pair_list(ex.qa_pairs) and ex.qa_pairs
            assert _str_list(ex.long_answers) and ex.long_answers
            assert all(set(p) == {"title", "text"} and p["text"] for p in ex.gold_passages)
            assert set(ex.answers) == {a for p in ex.qa_pairs for a in p["short_answers"]}
        # most questions come with the passages their annotators used
        assert sum(bool(ex.gold_passages) for ex in examples) > 0.9 * len(examples)
    dev = load_dataset("asqa:dev", data_root=shared_data)
    assert all(len(ex.long_answers) == 2 for ex in dev)
    assert not any(p["text"] == "No context provided" for ex in dev for p in ex.gold_passages)
    train = load_dataset("asqa:train", data_root=shared_data)
    first = train[0].gold_passages[0]
    assert not first["text"].startswith(first["title"] + "\n")  # "Title\n\nText" was split


def test_ambignq_fields(shared_data):
    examples = load_dataset("ambignq:train_light", data_root=shared_data)
    ambiguous = [ex for ex in examples if ex.ambiguous]
    assert 4_000 < len(ambiguous) < 6_000
    for ex in examples:
        assert _pair_list(ex.qa_pairs) and ex.qa_pairs
        assert all(_pair_list(a) for a in ex.annotations)
        if not ex.ambiguous:
            assert len(ex.qa_pairs) == 1 and ex.qa_pairs[0]["question"] == ex.question
    assert all(len(ex.qa_pairs) >= 2 for ex in ambiguous[:100])


def test_situatedqa_fields(shared_data):
    temp = load_dataset("situatedqa:temp.dev:50", data_root=shared_data)
    geo = load_dataset("situatedqa:geo.dev:50", data_root=shared_data)
    assert {ex.context_type for ex in temp} == {"date"}
    assert {ex.context_type for ex in geo} == {"location"}
    for ex in temp + geo:
        assert ex.edited_question and ex.context and _str_list(ex.any_answers)


def test_situatedqa_repeated_rows_get_unique_ids(shared_data):
    examples = load_dataset("situatedqa:temp.dev", data_root=shared_data)
    assert any("#" in ex.id for ex in examples)


def test_hotpotqa_both_layouts(shared_data):
    for spec in ("hotpotqa:dev", "hotpotqa:train"):
        for ex in load_dataset(spec, data_root=shared_data):
            assert isinstance(ex.answer, str) and ex.answer == ex.answers[0]
            assert len(ex.supporting_titles) == 2
            assert all(set(c) == {"title", "text", "is_supporting"} for c in ex.contexts)
            supporting = {c["title"] for c in ex.contexts if c["is_supporting"]}
            assert supporting == set(ex.supporting_titles)


def test_nq_oracle_has_one_gold_passage(shared_data):
    examples = load_dataset("nq:oracle", data_root=shared_data)
    assert all(len(ex.gold_passages) == 1 for ex in examples)
    assert examples[0].gold_passages[0]["title"] == "Reading F.C."


def test_data_root_from_environment(shared_data, monkeypatch):
    monkeypatch.setenv("AMBIQA_DATA", str(shared_data))
    assert len(load_dataset("webq:dev:3")) == 3


# ---------------------------------------------------------------------------------------------
# other layouts of the full-size releases


def test_asqa_official_layout_needs_a_split(tmp_path):
    sample = {"ambiguous_question": "Q?", "qa_pairs": [{"question": "q1", "short_answers": ["a"],
                                                         "context": "ctx", "wikipage": "T"}],
              "annotations": [{"long_answer": "L", "knowledge": [{"content": "K",
                                                                   "wikipage": "KT"}]}]}
    path = _write_json(tmp_path / "ASQA.json", {"train": {"s1": sample, "s2": sample},
                                                "dev": {"s3": sample}})
    with pytest.raises(DataError, match="several splits"):
        load_asqa(path)
    dev = load_asqa(path, section="dev")
    assert [ex.id for ex in dev] == ["s3"]
    assert {p["title"] for p in dev[0].gold_passages} == {"T", "KT"}
    assert len(load_dataset(f"asqa:{path}#train")) == 2
    with pytest.raises(DataError, match="no split 'test'"):
        load_asqa(path, section="test")
    # the same file under a data root serves asqa:train / asqa:dev
    (tmp_path / "asqa").mkdir()
    (tmp_path / "asqa" / "ASQA.json").write_text(path.read_text())
    assert len(load_dataset("asqa:train", data_root=tmp_path)) == 2


def test_asqa_mapping_keyed_by_sample_id(tmp_path):
    path = _write_json(tmp_path / "dev.json", {"abc": {
        "ambiguous_question": "Q?", "qa_pairs": [{"question": "q", "short_answers": "x"}]}})
    (ex,) = load_asqa(path)
    assert ex.id == "abc" and ex.qa_pairs[0]["short_answers"] == ["x"] and ex.long_answers == []


def test_ambignq_full_release(tmp_path):
    row = {"id": "7", "question": "who won?", "nq_answer": ["X"], "viewed_doc_titles": ["T"],
           "used_queries": [{"query": "q", "results": [{"title": "T", "snippet": "s"}]}],
           "annotations": [{"type": "singleAnswer", "answer": ["X"]},
                           {"type": "multipleQAs", "qaPairs": [
                               {"question": "who won in 1990?", "answer": ["A"]},
                               {"question": "who won in 2000?", "answer": "B"}]}]}
    (ex,) = load_ambignq(_write_json(tmp_path / "dev.json", [row]))
    assert ex.ambiguous and [p["short_answers"] for p in ex.qa_pairs] == [["A"], ["B"]]
    assert ex.answers == ["X", "A", "B"] and ex.nq_answer == ["X"]
    assert ex.viewed_doc_titles == ["T"] and len(ex.annotations) == 2


def test_hotpotqa_hf_columns_and_2wiki_evidences(tmp_path):
    row = {"_id": "h1", "question": "Q?", "answer": "yes", "type": "comparison",
           "supporting_facts": {"title": ["A", "B"], "sent_id": [0, 1]},
           "context": {"title": ["A", "B", "C"],
                       "sentences": [["One.", "Two."], ["Three."], ["Four."]]},
           "evidences": [["A", "born", "1900"]]}
    (ex,) = load_2wikimultihopqa(_write_json(tmp_path / "dev.json", [row]))
    assert ex.supporting_titles == ["A", "B"] and ex.contexts[0]["text"] == "One. Two."
    assert [c["is_supporting"] for c in ex.contexts] == [True, True, False]
    assert ex.evidences == [["A", "born", "1900"]] and ex.type == "comparison"


def test_nq_plain_and_flagged_gold(tmp_path):
    path = _write_jsonl(tmp_path / "NQ-open.dev.jsonl", [
        {"question": "q1", "answer": ["a1"]},
        {"question": "q2", "answers": ["a2"], "ctxs": [
            {"title": "G", "text": "gold", "isgold": True},
            {"title": "D", "text": "distractor", "isgold": False}]},
    ])
    plain, flagged = load_nq(path)
    assert plain.gold_passages == [] and plain.answers == ["a1"]
    assert flagged.gold_passages == [{"title": "G", "text": "gold"}]
    assert plain.id != flagged.id


def test_triviaqa_release(tmp_path):
    path = _write_json(tmp_path / "wikipedia-dev.json", {"Version": 1.0, "Data": [
        {"QuestionId": "tc_1", "Question": "Which planet?",
         "Answer": {"Value": "Mars", "Aliases": ["Mars", "Red Planet"],
                    "NormalizedAliases": ["mars", "red planet"]}}]})
    (ex,) = load_triviaqa(path)
    assert ex.id == "tc_1" and ex.answers == ["Mars", "Red Planet"]
    bad = _write_json(tmp_path / "x.json", {"Data": [{"QuestionId": "t", "Question": "Q"}]})
    with pytest.raises(DataError, match=r"record 1.*'Answer'"):
        load_triviaqa(bad)


def test_webq_original_release(tmp_path):
    path = _write_json(tmp_path / "webquestions.examples.test.json", [
        {"url": "u", "utterance": "what did matisse paint?",
         "targetValue": '(list (description Fauvism) (description "Neo-impressionism"))'}])
    (ex,) = load_webq(path)
    assert ex.question == "what did matisse paint?"
    assert ex.answers == ["Fauvism", "Neo-impressionism"]


def test_gzipped_jsonl(tmp_path):
    path = tmp_path / "dev.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write(json.dumps({"id": "1", "question": "q", "answer": ["a"]}) + "\n")
    assert load_webq(path)[0].answers == ["a"]


def test_split_selector_never_ignored(tmp_path):
    """'#train' on a file that holds no splits must fail, not load dev data as training data."""
    path = _write_json(tmp_path / "dev.json", [
        {"ambiguous_question": "Q", "qa_pairs": [{"question": "q", "short_answers": ["a"]}]}])
    with pytest.raises(DataError, match="no 'split' field"):
        load_dataset(f"asqa:{path}#train")
    assert not is_training_split(f"asqa:{path}#train")
    rows = _write_jsonl(tmp_path / "questions.jsonl", [{"question": "q", "answer": ["a"]}])
    with pytest.raises(ConfigError, match="single split"):
        load_dataset(f"webq:{rows}#train")


def test_repeated_ids_made_unique(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", [
        {"id": "x", "question": "q", "answer": ["a"]},
        {"id": "x#2", "question": "q", "answer": ["a"]},
        {"id": "x", "question": "q", "answer": ["a"]}])
    assert [ex.id for ex in load_webq(path)] == ["x", "x#2", "x#3"]


def test_json_file_holding_json_lines(tmp_path):
    path = tmp_path / "dev.json"
    _write_jsonl(path, [{"question": "q1", "answer": ["a"]}, {"question": "q2", "answer": ["b"]}])
    assert [ex.question for ex in load_webq(path)] == ["q1", "q2"]


# ---------------------------------------------------------------------------------------------
# malformed input: the message names the file, the record or line, and the field


@pytest.mark.parametrize("loader,good,field", [
    (load_asqa, {"ambiguous_question": "Q", "qa_pairs": []}, "ambiguous_question"),
    (load_asqa, {"ambiguous_question": "Q", "qa_pairs": []}, "qa_pairs"),
    (load_ambignq, {"question": "Q", "annotations": [{"type": "singleAnswer", "answer": ["a"]}]},
     "annotations"),
    (load_hotpotqa, {"question": "Q", "answer": "a", "context": []}, "answer"),
    (load_nq, {"question": "Q", "answers": ["a"]}, "question"),
    (load_webq, {"question": "Q", "answer": ["a"]}, "question"),
])
def test_missing_field_named_in_json(tmp_path, loader, good, field):
    bad = {k: v for k, v in good.items() if k != field}
    path = _write_json(tmp_path / "data.json", [good, bad])
    with pytest.raises(DataError) as err:
        loader(path)
    message = str(err.value)
    assert str(path) in message and "record 2" in message and f"'{field}'" in message


def test_missing_field_named_in_jsonl(tmp_path):
    row = {"question": "q", "edited_question": "q in 2001", "date": "2001", "answer": ["a"]}
    path = _write_jsonl(tmp_path / "temp.dev.jsonl",
                        [row, row, {k: v for k, v in row.items() if k != "edited_question"}])
    with pytest.raises(DataError, match=r"temp\.dev\.jsonl, line 3: missing field "
                                        r"'edited_question'"):
        load_situatedqa(path)
    no_context = {k: v for k, v in row.items() if k != "date"}
    with pytest.raises(DataError, match="'date' or 'location'"):
        load_situatedqa(_write_jsonl(tmp_path / "x.jsonl", [no_context]))


def test_missing_nested_field_named(tmp_path):
    path = _write_json(tmp_path / "dev.json", [{
        "ambiguous_question": "Q", "qa_pairs": [{"question": "q", "short_answers": ["a"]},
                                                {"question": "q2"}]}])
    with pytest.raises(DataError, match=r"record 1: missing field 'qa_pairs\[1\]\.short_answers'"):
        load_asqa(path)
    bad_type = _write_json(tmp_path / "amb.json", [{
        "question": "Q", "annotations": [{"type": "maybe"}]}])
    with pytest.raises(DataError, match=r"annotations\[0\]\.type"):
        load_ambignq(bad_type)


def test_wrong_types_are_data_errors(tmp_path):
    path = _write_jsonl(tmp_path / "dev.jsonl", [{"question": "q", "answer": [{"x": 1}]}])
    with pytest.raises(DataError, match="'answer' item 0 must be a string"):
        load_webq(path)
    with pytest.raises(DataError, match="expected a JSON object"):
        load_webq(_write_jsonl(tmp_path / "list.jsonl", [[1, 2]]))
    with pytest.raises(DataError, match="expected a JSON array or object"):
        load_webq(_write_json(tmp_path / "num.json", 3))


def test_broken_json_line(tmp_path):
    path = tmp_path / "dev.jsonl"
    path.write_text('{"question": "q", "answer": ["a"]}\n\n{"question": "q2", "answer": [\n')
    with pytest.raises(DataError, match=r"dev\.jsonl, line 3: invalid JSON"):
        load_webq(path)


def test_broken_json_file(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text('[\n {"ambiguous_question": "Q",\n  "qa_pairs": [}\n]')
    with pytest.raises(DataError, match=r"dev\.json, line 3: invalid JSON"):
        load_asqa(path)


def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "nowhere" / "dev.json"
    with pytest.raises(DataError, match="nowhere/dev.json"):
        load_asqa(path)
    with pytest.raises(DataError, match=r"nowhere/dev\.json"):
        load_dataset(f"asqa:{path}")
    with pytest.raises(DataError, match=r"webq/dev\.jsonl"):
        load_dataset("webq:dev", data_root=tmp_path)


def test_not_utf8(tmp_path):
    path = tmp_path / "dev.jsonl"
    path.write_bytes(b'{"question": "\xff\xfe", "answer": ["a"]}\n')
    with pytest.raises(DataError, match="not UTF-8"):
        load_webq(path)


# ---------------------------------------------------------------------------------------------
# specs


def test_spec_limit_and_path(shared_data):
    assert len(load_dataset("asqa:dev:5", data_root=shared_data)) == 5
    spec = parse_spec("HotpotQA:/data/x.json:20")
    assert (spec.name, spec.path, spec.limit) == ("hotpotqa", "/data/x.json", 20)
    assert parse_spec("2wiki:dev").name == "2wikimultihopqa"
    assert parse_spec("situatedqa:temp.dev").split == "temp.dev"
    assert parse_spec("asqa:dev.json").path == "dev.json"
    assert parse_spec("asqa:/x/ASQA.json#dev").part == "dev"
    assert str(parse_spec("asqa:train:50")) == "asqa:train:50"


def test_spec_range_keeps_examples_a_to_b_with_their_ids(shared_data):
    """``A-B`` names questions held out from a run on the first N (tuning on NQ 61-160 while
    the table scores NQ 1-60): the ids are those of the whole split, so the two never share a
    question."""
    first = load_dataset("nq:oracle:12", data_root=shared_data)
    part = load_dataset("nq:oracle:11-12", data_root=shared_data)
    assert [ex.id for ex in part] == [ex.id for ex in first[10:12]]
    assert [ex.question for ex in part] == [ex.question for ex in first[10:12]]
    spec = parse_spec("nq:oracle:61-160")
    assert (spec.start, spec.limit, str(spec)) == (61, 160, "nq:oracle:61-160")
    assert parse_spec("webq:/x/q.jsonl:3-4").start == 3
    assert not is_training_split("nq:oracle:61-160")


def test_path_spec_reads_a_file(tmp_path):
    path = _write_jsonl(tmp_path / "mine.jsonl",
                        [{"question": f"q{i}", "answer": ["a"]} for i in range(4)])
    assert len(load_dataset(f"webq:{path}:2")) == 2
    assert len(load_dataset(f"webq:{path}")) == 4


@pytest.mark.parametrize("spec,match", [
    ("", "bad dataset spec"),
    ("asqa", "bad dataset spec"),
    ("asqa:", "bad dataset spec"),
    (":dev", "bad dataset spec"),
    ("squad:dev", "unknown data set 'squad'.*asqa.*hotpotqa"),
    ("asqa:validation", "unknown split 'validation'.*train, dev"),
    ("asqa:dev:0", "at least 1"),
    ("asqa:dev:-3", "at least 1"),
    ("asqa:dev:x", "unknown split"),
    ("demo:/x/y.json", "unknown split"),
    ("asqa:7", "unknown split"),
    ("asqa:dev:5-2", "1 <= A <= B"),
    ("asqa:dev:0-2", "1 <= A <= B"),
])
def test_bad_specs(spec, match):
    with pytest.raises(ConfigError, match=match):
        parse_spec(spec)


def test_spec_must_be_a_string():
    with pytest.raises(ConfigError):
        parse_spec(None)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_parse_spec_only_raises_config_error(text):
    try:
        spec = parse_spec(text)
    except ConfigError:
        return
    assert spec.name in DATASETS or spec.name == "demo"
    assert (spec.split is None) != (spec.path is None)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([*DATASETS, "demo", "2wiki"]), st.text(), st.one_of(
    st.none(), st.integers(-5, 10**20)))
def test_parse_spec_structured_strings(name, rest, limit):
    text = f"{name}:{rest}" + ("" if limit is None else f":{limit}")
    try:
        spec = parse_spec(text)
    except ConfigError:
        return
    if spec.limit is not None:
        assert spec.limit >= 1
    is_training_split(spec)  # never raises for a parsed spec


@pytest.mark.parametrize("spec,training", [
    ("asqa:train", True), ("asqa:dev", False), ("asqa:train:50", True),
    ("ambignq:train_light", True), ("ambignq:dev_light", False),
    ("situatedqa:temp.train", True), ("situatedqa:geo.dev", False),
    ("hotpotqa:dev", False), ("nq:oracle", False), ("webq:test", False), ("webq:train", True),
    ("demo:train", True), ("demo:dev", False),
    ("asqa:/data/ASQA.json#train", True), ("asqa:/data/ASQA.json#dev", False),
    ("hotpotqa:/data/hotpot_dev_distractor_v1.json", False),
    ("nq:/data/NQ-open.train.jsonl", True), ("webq:/data/test.jsonl", False),
    ("webq:/data/my_questions.jsonl", True),
])
def test_is_training_split(spec, training):
    assert is_training_split(spec) is training


def test_every_registered_split_resolves_or_names_its_file(tmp_path):
    for name, (_fmt, splits) in DATASETS.items():
        for split in splits:
            with pytest.raises(DataError, match=str(tmp_path)):
                load_dataset(f"{name}:{split}", data_root=tmp_path)


def test_no_data_root(monkeypatch):
    import ambiqa.data.specs as specs

    monkeypatch.setattr(specs, "default_data_root", lambda: None)
    with pytest.raises(DataError, match="no data root"):
        load_dataset("asqa:dev")


# ---------------------------------------------------------------------------------------------
# corpus


def _corpus(tmp_path: Path, rows: list[object], name: str = "corpus.jsonl") -> Path:
    return _write_jsonl(tmp_path / name, rows)


def test_shared_corpus(shared_data):
    path = shared_data / "corpus" / "wiki_passages.jsonl"
    passages = load_corpus(path)
    assert len(passages) == 12_843 and len({p.id for p in passages}) == 12_843
    assert all(p.text.strip() for p in passages)
    assert corpus_fingerprint(path) == hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def test_iter_corpus_streams(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"id": "1", "title": "A", "text": "alpha"}\n'
                    '{"id": "2", "title": "B", "text": "beta"}\n'
                    "{broken\n")
    stream = iter_corpus(path)
    assert [next(stream).id, next(stream).id] == ["1", "2"]  # nothing past line 2 was needed
    with pytest.raises(DataError, match=r"corpus\.jsonl, line 3: invalid JSON"):
        next(stream)


def test_corpus_duplicate_id(tmp_path):
    path = _corpus(tmp_path, [{"id": "p1", "title": "A", "text": "a"},
                              {"id": "p2", "title": "B", "text": "b"},
                              {"id": "p1", "title": "C", "text": "c"}])
    with pytest.raises(DataError, match=r"line 3: duplicate passage id 'p1' \(first seen at "
                                        r"line 1\)"):
        load_corpus(path)
    assert len(list(iter_corpus(path, check_duplicates=False))) == 3


@pytest.mark.parametrize("row,match", [
    ({"id": "x", "title": "A"}, "missing field 'text'"),
    ({"id": "x", "title": "A", "text": "  \n"}, "passage 'x' has an empty text"),
    ({"id": "", "title": "A", "text": "a"}, "field 'id' is empty"),
    ({"id": ["x"], "title": "A", "text": "a"}, "field 'id' must be a string"),
    ({"id": "x", "title": "A", "text": 3}, "field 'text' of passage 'x' must be a string"),
])
def test_corpus_bad_passage(tmp_path, row, match):
    path = _corpus(tmp_path, [{"id": "ok", "title": "T", "text": "fine"}, row])
    with pytest.raises(DataError, match=match) as err:
        load_corpus(path)
    assert str(path) in str(err.value) and "line 2" in str(err.value)


def test_corpus_empty_and_missing(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DataError, match="holds no passages"):
        load_corpus(empty)
    with pytest.raises(DataError, match=r"corpus file not found: .*absent\.jsonl"):
        iter_corpus(tmp_path / "absent.jsonl")  # fails at the call, before iteration
    with pytest.raises(DataError, match="absent"):
        corpus_fingerprint(tmp_path / "absent.jsonl")


def test_corpus_dpr_tsv_and_gzip(tmp_path):
    tsv = tmp_path / "psgs_w100.tsv"
    tsv.write_text("id\ttext\ttitle\n1\tAaron is a prophet.\tAaron\n2\tAbel is a son.\tAbel\n")
    assert [(p.id, p.title) for p in load_corpus(tsv)] == [("1", "Aaron"), ("2", "Abel")]
    gz = tmp_path / "c.jsonl.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as fh:
        fh.write(json.dumps({"id": 5, "title": "T", "text": "t"}) + "\n")
    assert load_corpus(gz)[0].id == "5"
    bad = tmp_path / "bad.tsv"
    bad.write_text("id\tbody_html\n1\tx\n")  # no text column (title and id are optional)
    with pytest.raises(DataError, match="lacks column"):
        load_corpus(bad)


def test_fingerprint_changes_with_content(tmp_path):
    a = _corpus(tmp_path, [{"id": "1", "title": "A", "text": "a"}], "a.jsonl")
    b = _corpus(tmp_path, [{"id": "1", "title": "A", "text": "b"}], "b.jsonl")
    assert len(corpus_fingerprint(a)) == 16 and corpus_fingerprint(a) != corpus_fingerprint(b)


# ---------------------------------------------------------------------------------------------
# bundled demo set


def test_demo_splits(monkeypatch, tmp_path):
    monkeypatch.setenv("AMBIQA_DATA", str(tmp_path))  # the demo never needs the data root
    train, dev = load_dataset("demo:train"), load_dataset("demo:dev")
    assert len(train) == 10 and len(dev) == 4
    assert not {ex.id for ex in train} & {ex.id for ex in dev}
    for ex in train + dev:
        assert len(ex.qa_pairs) >= 2 and _pair_list(ex.qa_pairs)
        assert len(ex.long_answers) == 1 and ex.gold_passages
    assert len(load_dataset("demo:train:3")) == 3


def test_demo_corpus_answers_every_disambiguation():
    passages = load_corpus(demo_corpus_path())
    assert 200 <= len(passages) <= 300
    assert all(p.id.startswith("demo-") for p in passages)
    assert all(40 <= len(p.text.split()) <= 90 for p in passages)
    texts = [p.text.lower() for p in passages]
    by_text = {p.text: p for p in passages}
    for ex in load_dataset("demo:train") + load_dataset("demo:dev"):
        for pair in ex.qa_pairs:
            assert pair["short_answers"]
            for answer in pair["short_answers"]:
                assert any(answer.lower() in t for t in texts), (pair["question"], answer)
        for gold in ex.gold_passages:  # every cited passage is in the corpus, verbatim
            assert by_text[gold["text"]].title == gold["title"]


def test_demo_files_are_package_data():
    assert demo_questions_path().parent.name == "demo"
    raw = json.loads(demo_questions_path().read_text(encoding="utf-8"))
    assert {r["split"] for r in raw} == {"train", "dev"}


def test_records_without_an_id_get_a_stable_file_position_id(tmp_path):
    """Own id first, then the mapping key, then ``<file stem>-<n>``; repeats get ``#n``."""
    rows = [{"question": "q one", "answers": ["a"]},
            {"id": "own", "question": "q two", "answers": ["b"]},
            {"id": "own", "question": "q three", "answers": ["c"]}]
    ids = [ex.id for ex in load_nq(_write_jsonl(tmp_path / "nq.dev.jsonl", rows))]
    assert ids == ["nq-1", "own", "own#2"]
    hotpot = [{"question": "q", "answer": "a", "context": [], "supporting_facts": []}]
    assert [ex.id for ex in load_hotpotqa(_write_json(tmp_path / "hp.json", hotpot))] == ["hp-1"]
    keyed = {"k1": {"question": "q", "answers": ["a"]}}
    assert [ex.id for ex in load_nq(_write_json(tmp_path / "keyed.json", keyed))] == ["k1"]
