"""Metrics, readers and the metric registry, each pinned to a hand-computed value."""

from __future__ import annotations

import dspy
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ambiqa.errors import ConfigError, ModelError
from ambiqa.evaluation import metrics as m
from ambiqa.evaluation.reader import HFQAReader, LMReader, make_reader
from ambiqa.evaluation.registry import METRICS, dspy_metric, get_metric
from ambiqa.testing import scripted_lm

# ---------------------------------------------------------------- normalization, EM, token F1


def test_normalize_answer_follows_squad():
    # lowercase -> drop punctuation -> drop articles -> squeeze whitespace
    assert m.normalize_answer("  The Cat's   hat, an apple!") == "cats hat apple"
    assert m.normalize_answer("A") == ""


def test_exact_match_takes_best_gold():
    assert m.exact_match("The Cat!", ["dog", "a cat"]) == 1.0  # "cat" == "cat"
    assert m.exact_match("cat sat", ["cat"]) == 0.0
    assert m.exact_match("anything", []) == 0.0


def test_token_f1_hand_computed():
    # "the cat sat" -> [cat, sat]; "cat sat down" -> [cat, sat, down]; common = 2
    # P = 2/2 = 1, R = 2/3, F1 = 2*1*(2/3) / (1 + 2/3) = (4/3)/(5/3) = 0.8
    assert m.token_f1("the cat sat", ["cat sat down"]) == pytest.approx(0.8)
    # best over golds: vs "dog" = 0, vs "cat sat" = 1
    assert m.token_f1("the cat sat", ["dog", "cat sat"]) == 1.0
    # repeated tokens count once per occurrence: [a1, a1, b] vs [a1, b] -> common 2,
    # P = 2/3, R = 1, F1 = 2*(2/3)/(5/3) = 0.8
    assert m.token_f1("a1 a1 b", "a1 b") == pytest.approx(0.8)
    # SQuAD2 convention: empty vs empty = 1, empty vs something = 0
    assert m.token_f1("", [""]) == 1.0
    assert m.token_f1("", ["paris"]) == 0.0


@given(st.text(max_size=40), st.lists(st.text(max_size=40), max_size=4))
def test_em_and_f1_are_in_unit_interval(pred, golds):
    assert 0.0 <= m.exact_match(pred, golds) <= 1.0
    assert 0.0 <= m.token_f1(pred, golds) <= 1.0


@given(st.text(max_size=60))
def test_a_string_matches_itself(text):
    assert m.exact_match(text, [text]) == 1.0
    assert m.token_f1(text, [text]) == 1.0


# ---------------------------------------------------------------- ASQA: ROUGE-Lsum, STR-EM, D-F1


def test_sentence_splitter_is_punkt_english():
    text = "J. K. Rowling wrote it in 1997. The U.S. team won! \"Yes,\" he said. Mr. Smith left."
    assert m.split_sentences(text) == [
        "J. K. Rowling wrote it in 1997.", "The U.S. team won!", "\"Yes,\" he said.",
        "Mr. Smith left."]
    # Punkt's orthographic evidence needs capitals: the ASQA scorer lowercases first, so a
    # lowercase sentence after an abbreviation-like token stays joined, as it does there
    assert m.split_sentences("it was the u.s. team. they won.") == [
        "it was the u.s. team.", "they won."]
    assert m.split_sentences("") == [] and m.split_sentences("   ") == []


def test_rouge_lsum_splits_lowercased_text_like_the_asqa_scorer(monkeypatch):
    seen = []
    real = m.split_sentences
    monkeypatch.setattr(m, "split_sentences", lambda t: seen.append(t) or real(t))
    m.rouge_lsum("Jaws Was Made. In 1975.", ["JAWS was made in 1975."])
    assert seen == ["jaws was made. in 1975.", "jaws was made in 1975."]


def test_rouge_lsum_identical_is_one_and_empty_is_zero():
    text = "Jaws was directed by Steven Spielberg. It came out in 1975."
    assert m.rouge_lsum(text, [text]) == pytest.approx(1.0)
    assert m.rouge_lsum("", [text]) == 0.0


def test_rouge_lsum_hand_checked():
    # rouge-score tokens (lowercase, Porter stem): pred [the, cat, were, sit],
    # ref [the, cat, sat, on, the, mat]; LCS = [the, cat] = 2
    # P = 2/4, R = 2/6, F = 2*(1/2)(1/3) / (1/2 + 1/3) = (1/3)/(5/6) = 0.4
    assert m.rouge_lsum("The cats were sitting", ["the cat sat on the mat"]) == pytest.approx(0.4)
    # max over references: the second reference is the prediction itself
    assert m.rouge_lsum("The cats were sitting",
                        ["the cat sat on the mat", "the cats were sitting"]) == pytest.approx(1.0)


def test_rouge_lsum_is_summary_level_over_sentences():
    # Swapped sentence order. Plain ROUGE-L on one token stream: LCS 3 of 6 tokens -> 0.5.
    # Lsum, one sentence per line: each reference sentence is fully covered by the union
    # LCS against the prediction's sentences -> R = 6/6, P = 6/6 -> 1.0.
    pred, ref = "London is old. Paris is big.", "Paris is big. London is old."
    assert m.rouge_lsum(pred, [ref]) == pytest.approx(1.0)


QA_PAIRS = [
    {"question": "Who directed Jaws?", "short_answers": ["Steven Spielberg"]},
    {"question": "When was Jaws released?", "short_answers": ["1975", "June 20, 1975"]},
    {"question": "Who wrote the Jaws score?", "short_answers": ["John Williams"]},
]
LONG = "Jaws was directed by Steven Spielberg and released in 1975; the music is famous."


def test_str_em_two_of_three():
    # "steven spielberg" found, "1975" found, "john williams" not -> 2/3
    assert m.str_em(LONG, QA_PAIRS) == pytest.approx(2 / 3)
    assert m.str_em(LONG, []) == 0.0


class FakeReader:
    """Answers from a fixed table and records what it was asked."""

    name = "fake"

    def __init__(self, table: dict[str, str]) -> None:
        self.table = table
        self.calls: list[tuple[str, str]] = []

    def answer(self, question: str, context: str) -> str:
        self.calls.append((question, context))
        return self.table.get(question, "")


def test_disambig_f1_with_fake_reader():
    reader = FakeReader({"Who directed Jaws?": "Steven Spielberg",
                         "When was Jaws released?": "in 1975"})
    # pair 1: F1 1.0; pair 2: [in, 1975] vs [1975] -> P 1/2, R 1, F1 2/3 (vs "June 20, 1975":
    # [june, 20, 1975] -> P 1/2, R 1/3, F1 0.4; max = 2/3); pair 3: "" -> 0
    # mean = (1 + 2/3 + 0) / 3 = 5/9
    assert m.disambig_f1(LONG, QA_PAIRS, reader) == pytest.approx(5 / 9)
    assert [q for q, _ in reader.calls] == [p["question"] for p in QA_PAIRS]
    assert all(ctx == LONG for _, ctx in reader.calls)  # the reader reads the long answer
    empty = FakeReader({})
    assert m.disambig_f1("   ", QA_PAIRS, empty) == 0.0 and empty.calls == []


def test_dr_is_geometric_mean():
    assert m.dr_score(0.25, 0.64) == pytest.approx(0.4)  # sqrt(0.16)
    assert m.dr_score(0.0, 0.9) == 0.0


def test_run_rows_keep_dr_parts_and_dr_q_not_a_row_dr():
    from ambiqa.evaluation.runs.runner import score_row

    calls = []

    def dr_fn(ex, pred):  # must not be called: the parts are already scored
        calls.append(1)
        return 0.0

    row = score_row(None, None, {"d-f1": lambda ex, p: 0.25, "rouge-l": lambda ex, p: 0.64,
                                 "dr": dr_fn})
    assert row == {"d-f1": 0.25, "rouge-l": 0.64, "dr_q": pytest.approx(0.4)}
    assert calls == []


def test_dr_is_the_root_of_set_means_not_the_mean_of_roots():
    from ambiqa.evaluation.runs.runner import summarize

    rows = [{"id": "a", "error": None, "metrics": {"d-f1": 1.0, "rouge-l": 0.0}},
            {"id": "b", "error": None, "metrics": {"d-f1": 0.0, "rouge-l": 1.0}}]
    # every per-question root is 0, but sqrt(0.5 * 0.5) = 0.5
    assert summarize(rows, ["dr"])["metrics"]["dr"]["mean"] == pytest.approx(0.5)


def test_metric_fns_for_dr_alone_still_give_the_set_level_dr():
    """`ambiqa compile --metric dr` scores its dev set through metric_fns(["dr"])."""
    from ambiqa.cli.common import metric_fns
    from ambiqa.evaluation.runs.runner import evaluate

    reader = FakeReader({"Who directed Jaws?": "Steven Spielberg"})
    fns = metric_fns(["dr"], reader)
    assert list(fns) == ["d-f1", "rouge-l", "dr"]
    summary = evaluate(lambda question: dspy.Prediction(answer=LONG), [ASQA_EX], fns,
                       progress=False)
    dr = summary["metrics"]["dr"]
    d, r = summary["metrics"]["d-f1"]["mean"], summary["metrics"]["rouge-l"]["mean"]
    assert d == pytest.approx(1 / 3) and dr["n"] == 1
    assert dr["mean"] == pytest.approx((d * r) ** 0.5)


def test_evaluate_adds_the_parts_dr_is_computed_from():
    from ambiqa.cli.eval_cmds import _metric_names

    assert _metric_names("str-em,dr") == ["str-em", "d-f1", "rouge-l", "dr"]
    assert _metric_names("rouge-l,d-f1,dr") == ["rouge-l", "d-f1", "dr"]


def test_answer_f1_pairs():
    preds = [{"question": "Who directed Jaws?", "answer": "Spielberg"},
             {"question": "When?", "answer": "1975"},
             {"question": "Who produced it?", "answer": "George Lucas"}]
    # each answer's best F1 against all gold short answers:
    # "spielberg" vs "steven spielberg": P 1, R 1/2 -> 2/3; "1975" -> 1; "george lucas" -> 0
    # mean over the 3 generated pairs = (2/3 + 1 + 0) / 3 = 5/9
    assert m.answer_f1_pairs(preds, QA_PAIRS) == pytest.approx(5 / 9)
    assert m.answer_f1_pairs([], QA_PAIRS) == 0.0


# ---------------------------------------------------------------- retrieval


def test_recall_at_k():
    retrieved = ["a", "b", "c", "d"]
    assert m.recall_at_k(retrieved, {"b", "d", "z"}, 2) == pytest.approx(1 / 3)  # {b}
    assert m.recall_at_k(retrieved, {"b", "d", "z"}, 4) == pytest.approx(2 / 3)  # {b, d}


def test_answer_recall_matches_whole_tokens():
    texts = ["He was born in 1990 in Ohio.", "Paris is the capital of France."]
    assert m.answer_recall_at_k(texts, ["1"], 2) == 0.0  # "1" is not the token "1990"
    assert m.answer_recall_at_k(texts, ["Paris"], 1) == 0.0  # not in the top 1
    assert m.answer_recall_at_k(texts, ["the Paris", "Lyon"], 2) == 1.0


def test_mrecall_at_k():
    texts = ["Steven Spielberg directed it.", "It opened on June 20, 1975.", "Unrelated."]
    sets = [["Steven Spielberg"], ["1975"], ["John Williams"]]
    # n = 3 answers, 2 recovered (Spielberg, 1975).
    # k = 2 < n: success needs >= k = 2 recovered -> 1.0
    assert m.mrecall_at_k(texts, sets, 2) == 1.0
    # k = 5 >= n: success needs all 3 -> 0.0
    assert m.mrecall_at_k(texts, sets, 5) == 0.0
    # k = 1: only the first passage counts; 1 recovered >= k = 1 -> 1.0
    assert m.mrecall_at_k(texts, sets, 1) == 1.0
    assert m.mrecall_at_k(texts, sets[:2], 5) == 1.0  # n = 2 <= k, both found


# ---------------------------------------------------------------- EoR consistency


def test_rwr_mrwr_mrlr_three_systems():
    golds = ["a", "b", "c", "d"]
    answers = {
        "s1": ["a", "b", "x", "x"],  # right on q1, q2
        "s2": ["x", "x", "c", "x"],  # right on q3
        "s3": ["a", "b", "c", "d"],  # right on all
    }
    rwr = m.rwr_matrix(answers, golds)
    # RWR(i, j) = #(i right and j wrong) / #(j wrong)
    assert rwr["s1"]["s2"] == pytest.approx(2 / 3)  # s2 wrong on q1,q2,q4; s1 right on q1,q2
    assert rwr["s2"]["s1"] == pytest.approx(1 / 2)  # s1 wrong on q3,q4; s2 right on q3
    assert rwr["s3"]["s1"] == 1.0 and rwr["s3"]["s2"] == 1.0
    assert rwr["s1"]["s3"] == 0.0 and rwr["s2"]["s3"] == 0.0  # s3 never wrong: 0/0 -> 0
    # MRWR = row mean over the M-1 = 2 others; MRLR = column mean
    assert m.mrwr(rwr) == pytest.approx({"s1": (2 / 3 + 0) / 2, "s2": (1 / 2 + 0) / 2,
                                          "s3": 1.0})
    assert m.mrlr(rwr) == pytest.approx({"s1": (1 / 2 + 1) / 2, "s2": (2 / 3 + 1) / 2,
                                          "s3": 0.0})


def test_rwr_with_f1_similarity_and_length_check():
    rwr = m.rwr_matrix({"a": ["new york city"], "b": ["boston"]}, [["New York"]],
                       sim=m.token_f1, threshold=0.5)  # F1 = 0.8 >= 0.5 -> a right
    assert rwr["a"]["b"] == 1.0 and rwr["b"]["a"] == 0.0
    with pytest.raises(ValueError):
        m.rwr_matrix({"a": ["x", "y"]}, ["x"])


# ---------------------------------------------------------------- VerDICt grounding


def substring_judge(question: str, answer: str, passage: str) -> bool:
    return answer.lower() in passage.lower()


PRED = [
    m.GroundedQA("Who directed Jaws?", "Spielberg", ["Jaws was directed by Spielberg."]),
    m.GroundedQA("Who scored Jaws?", "John Williams", ["Jaws was released in 1975."]),
    m.GroundedQA("When was Jaws released?", "1975", ["Jaws was released in 1975."]),
]
GOLD = [
    m.GroundedQA("who directed Jaws", "Spielberg", ["Spielberg directed Jaws."]),  # = PRED[0]
    m.GroundedQA("Who wrote the Jaws novel?", "Peter Benchley", ["A novel by Peter Benchley."]),
    m.GroundedQA("Who produced Jaws?", "Zanuck", ["Jaws was released in 1975."]),  # ungrounded
    m.GroundedQA("In what year did Jaws come out?", "1975", ["Jaws premiered in 1975."]),
]


def test_grounded_precision_recall_f1():
    # precision: PRED[0] and PRED[2] are supported by their own passage -> 2/3
    p = m.grounded_precision(PRED, substring_judge)
    assert p == pytest.approx(2 / 3)
    # Q̄ = verified preds {P0, P2} + grounded golds not already among them {G1, G3}
    # (G0 duplicates P0, G2 is not grounded). Recalled: P0, P2 by construction; G3 because
    # the model's passage "Jaws was released in 1975." supports "1975"; G1 (Benchley) is not.
    # -> 3/4
    r = m.grounded_recall(PRED, GOLD, substring_judge)
    assert r == pytest.approx(3 / 4)
    # G-F1 = 2 * (2/3)(3/4) / (2/3 + 3/4) = 1 / (17/12) = 12/17
    assert m.g_f1(p, r) == pytest.approx(12 / 17)
    assert m.g_f1(0.0, 0.0) == 0.0
    assert m.grounded_precision([], substring_judge) == 0.0
    assert m.grounded_recall([], [], substring_judge) == 0.0


def test_num_interpretations_and_sufficient_rate():
    qs = ["Who directed Jaws?", "who directed jaws", "When was Jaws released?", "  "]
    assert m.num_interpretations(qs) == 2
    # 2 of 4 questions have >= 3 distinct interpretations
    assert m.sufficient_rate([1, 3, 4, 2], 3) == 0.5


# ---------------------------------------------------------------- registry


ASQA_EX = dspy.Example(question="Who directed Jaws and when?", qa_pairs=QA_PAIRS,
                       long_answers=["Jaws was directed by Steven Spielberg in 1975.",
                                     "Steven Spielberg made Jaws."]).with_inputs("question")
NQ_EX = dspy.Example(question="capital of france?", answers=["Paris", "City of Paris"])


def test_registry_on_asqa_example():
    pred = dspy.Prediction(answer=LONG, passages=[
        {"id": "1", "title": "Jaws", "text": "Directed by Steven Spielberg."},
        {"id": "2", "title": "Jaws", "text": "Released in 1975."}])
    reader = FakeReader({"Who directed Jaws?": "Steven Spielberg",
                         "When was Jaws released?": "in 1975"})
    assert METRICS["str-em"](ASQA_EX, pred) == pytest.approx(2 / 3)
    assert METRICS["d-f1"](ASQA_EX, pred, reader) == pytest.approx(5 / 9)
    rouge = METRICS["rouge-l"](ASQA_EX, pred)
    assert rouge == pytest.approx(m.rouge_lsum(LONG, ASQA_EX.long_answers))
    # 2 of the 3 answers are in the top 5 passages; n = 3 <= 5 needs all -> 0
    assert METRICS["mrecall@5"](ASQA_EX, pred) == 0.0
    assert METRICS["recall@5"](ASQA_EX, pred) == 1.0
    assert get_metric("mrecall@2")(ASQA_EX, pred) == 1.0  # n = 3 > k = 2, 2 found


def test_registry_on_short_answer_example_and_raw_asqa_record():
    pred = {"answer": "paris", "passages": [{"id": "x", "title": "", "text": "Lyon."}]}
    assert METRICS["em"](NQ_EX, pred) == 1.0 and METRICS["f1"](NQ_EX, pred) == 1.0
    assert METRICS["recall@5"](NQ_EX, pred) == 0.0
    with pytest.raises(ConfigError, match="qa_pairs"):
        METRICS["str-em"](NQ_EX, pred)
    raw = {"qa_pairs": QA_PAIRS, "annotations": [{"long_answer": "paris"}]}
    assert METRICS["rouge-l"](raw, pred) == pytest.approx(1.0)


def test_get_metric_suggests_nearest_name():
    assert get_metric("ROUGE_L") is METRICS["rouge-l"]
    assert get_metric("disambig-f1") is METRICS["d-f1"]
    with pytest.raises(ConfigError) as err:
        get_metric("rouge-k")
    assert "did you mean 'rouge-l'" in str(err.value)
    with pytest.raises(ConfigError) as err:
        get_metric("mrecal@5")
    assert "mrecall@5" in str(err.value)


def test_dspy_metric_returns_float_or_threshold_bool():
    pred = dspy.Prediction(answer=LONG)
    reader = FakeReader({"Who directed Jaws?": "Steven Spielberg"})
    metric = dspy_metric("d-f1", reader, threshold=0.5)
    assert metric(ASQA_EX, pred) == pytest.approx(1 / 3)  # (1 + 0 + 0) / 3
    assert metric(ASQA_EX, pred, trace=[]) is False  # bootstrapping: 1/3 < 0.5
    assert metric.reader_name == "fake"
    assert dspy_metric("str-em")(ASQA_EX, pred, trace=[]) == pytest.approx(2 / 3)


# ---------------------------------------------------------------- readers


def test_lm_reader_through_scripted_lm(use_lm):
    lm = use_lm(scripted_lm({"ReadShortAnswer": lambda inp: {
        "answer": "Steven Spielberg" if "directed" in inp["question"] else "unknown"}}))
    reader = LMReader()
    assert reader.name == "lm-reader:scripted/fake"
    assert reader.answer("Who directed Jaws?", LONG) == "Steven Spielberg"
    assert reader.answer("Who wrote the Jaws score?", LONG) == ""  # "unknown" -> no answer
    assert reader.answer("Who directed Jaws?", "") == ""  # no context, no call
    assert lm.engine.count("ReadShortAnswer") == 2
    # the reader's own predictor never enters a DSPy bootstrapping trace
    with dspy.context(trace=[]):
        reader.answer("Who directed Jaws?", LONG)
        assert dspy.settings.trace == []
    # end to end: (1 + 0 + 0) / 3
    assert m.disambig_f1(LONG, QA_PAIRS, reader) == pytest.approx(1 / 3)


def test_lm_reader_degrades_on_unparseable_reply_and_needs_an_lm(use_lm):
    use_lm(scripted_lm({"ReadShortAnswer": "no fields at all"}))
    assert LMReader().answer("Who directed Jaws?", LONG) == ""
    with dspy.context(lm=None):
        reader = LMReader()
        assert reader.name == "lm-reader:unconfigured"
        with pytest.raises(ConfigError):
            reader.answer("Who directed Jaws?", LONG)


@pytest.fixture(scope="module")
def tiny_checkpoints(tmp_path_factory):
    """A random 1-layer BERT QA checkpoint and a non-QA one, written locally (no download)."""
    torch = pytest.importorskip("torch")
    from transformers import BertConfig, BertForQuestionAnswering, BertModel, BertTokenizerFast

    root = tmp_path_factory.mktemp("readers")
    words = ("[PAD] [UNK] [CLS] [SEP] [MASK] paris is the capital of france who what city"
             ).split()
    cfg = BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=128)
    out = {}
    for name, cls in (("tiny-qa", BertForQuestionAnswering), ("tiny-base", BertModel)):
        d = root / name
        d.mkdir()
        (d / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
        torch.manual_seed(0)
        cls(cfg).save_pretrained(d)
        BertTokenizerFast(vocab_file=str(d / "vocab.txt")).save_pretrained(d)
        out[name] = d
    return out


def test_hf_reader_loads_a_local_qa_checkpoint(tiny_checkpoints):
    reader = make_reader(str(tiny_checkpoints["tiny-qa"]))
    assert isinstance(reader, HFQAReader) and reader.name == "hf:tiny-qa"
    context = "paris is the capital of france"
    answer = reader.answer("what is the capital of france", context)
    assert answer == "" or answer in context  # extractive: a span of the context or nothing
    assert reader.answer("what city", "") == ""


def test_hf_reader_rejects_bad_directories(tiny_checkpoints, tmp_path):
    with pytest.raises(ModelError, match="not found"):
        HFQAReader(tmp_path / "missing")
    with pytest.raises(ModelError, match="not a transformers checkpoint"):
        HFQAReader(tmp_path)  # exists, no config.json
    with pytest.raises(ModelError, match="not an extractive QA checkpoint"):
        HFQAReader(tiny_checkpoints["tiny-base"])


def test_make_reader_uses_the_lm_only_when_asked(use_lm):
    lm = use_lm(scripted_lm({}))
    reader = make_reader(None)
    assert not isinstance(reader, LMReader) and reader.name == "extractive:minilm-asqa-v4"
    assert isinstance(make_reader("lm"), LMReader)
    assert not lm.engine.calls


# ---------------------------------------------------------------- short answers, several golds


def test_em_f1_with_several_gold_answers_take_the_best():
    golds = ["Barack Obama", "Obama", "the 44th president"]
    assert m.exact_match("obama.", golds) == 1.0  # equals the 2nd gold after normalization
    # "president obama": vs "barack obama" common {obama}: P 1/2, R 1/2 -> 0.5;
    # vs "obama": P 1/2, R 1 -> 2/3; vs "44th president": P 1/2, R 1/2 -> 0.5. Best = 2/3.
    assert m.exact_match("president obama", golds) == 0.0
    assert m.token_f1("president obama", golds) == pytest.approx(2 / 3)
    ex = {"answers": golds}
    assert METRICS["em"](ex, {"answer": "Obama"}) == 1.0
    assert METRICS["f1"](ex, {"answer": "president obama"}) == pytest.approx(2 / 3)


# ---------------------------------------------------------------- interpretation metrics


def test_ungrounded_recall_and_precision_with_a_table_matcher():
    gold = ["Who directed Jaws?", "Who wrote the Jaws novel?", "Who produced Jaws?"]
    preds = ["Who directed the film Jaws?", "Who scored Jaws?"]
    same = {("Who directed Jaws?", "Who directed the film Jaws?")}

    def match(q, cands):
        return any((q, c) in same or (c, q) in same for c in cands)

    assert m.ungrounded_recall(preds, gold, match) == pytest.approx(1 / 3)  # 1 of 3 gold
    assert m.ungrounded_precision(preds, gold, match) == pytest.approx(1 / 2)  # 1 of 2 preds
    assert m.ungrounded_recall([], gold, match) == 0.0
    assert m.ungrounded_recall(preds, [], match) == 0.0


def test_lexical_match_threshold():
    # "who directed film jaws" vs "who directed jaws": common 3, P 3/4, R 1 -> F1 6/7 = 0.857
    assert m.lexical_match("Who directed the film Jaws?", ["Who directed Jaws?"])
    # "who wrote jaws novel" vs "who scored jaws": common 2, P 2/4, R 2/3 -> F1 4/7 = 0.571
    assert not m.lexical_match("Who wrote the Jaws novel?", ["Who scored Jaws?"])
    assert m.lexical_match("Who wrote the Jaws novel?", ["Who scored Jaws?"], threshold=0.5)


def test_grounded_recall_with_a_passage_pool():
    # same data as test_grounded_precision_recall_f1, but the model's passages are replaced by
    # one pool text that mentions Benchley: G1 is now recalled too -> 4/4
    pool = ["A novel by Peter Benchley. Jaws was released in 1975."]
    assert m.grounded_recall(PRED, GOLD, substring_judge, pool=pool) == pytest.approx(1.0)
    # an empty pool recalls only the verified generated ones: P0, P2 of {P0, P2, G1, G3}
    assert m.grounded_recall(PRED, GOLD, substring_judge, pool=[]) == pytest.approx(2 / 4)


# The scripted judge's rule: a question is supported by a passage block when both mention the
# same key word ("directed", "novel" or "released").
def _verify_rule(inp):
    q, ps = inp["interpretation"].lower(), inp["passages"].lower()
    return {"supported": any(w in q and w in ps for w in ("directed", "novel", "released"))}


MATCH_KEY = "Decide whether a list of questions already contains the given question."

INTERP_EX = dspy.Example(
    question="Who made Jaws?",
    qa_pairs=[{"question": "Who directed the film Jaws?", "short_answers": ["Steven Spielberg"]},
              {"question": "Who wrote the Jaws novel?", "short_answers": ["Peter Benchley"]},
              {"question": "Who produced Jaws?", "short_answers": ["Zanuck"]}],
    gold_passages=[{"id": "g1", "title": "Jaws", "text": "Jaws was directed by Spielberg."},
                   {"id": "g2", "title": "Jaws", "text": "It adapts the novel by Benchley."}],
).with_inputs("question")
INTERP_PRED = dspy.Prediction(
    answer="...",
    interpretations=[{"question": "Who directed Jaws?", "answer": "Spielberg", "passages": ["p1"]},
                     {"question": "Who scored Jaws?", "answer": "John Williams",
                      "passages": ["p2"]}],
    passages=[{"id": "p1", "title": "Jaws", "text": "Jaws was directed by Steven Spielberg."},
              {"id": "p2", "title": "Jaws", "text": "Jaws was released in 1975."}])


def test_interpretation_count_sufficient_and_answer_f1():
    assert METRICS["n-interp"](INTERP_EX, INTERP_PRED) == 2.0
    assert get_metric("sufficient@2")(INTERP_EX, INTERP_PRED) == 1.0
    assert METRICS["sufficient@3"](INTERP_EX, INTERP_PRED) == 0.0
    # "spielberg" vs "steven spielberg" -> 2/3; "john williams" -> 0; mean over 2 pairs = 1/3
    assert METRICS["answer-f1"](INTERP_EX, INTERP_PRED) == pytest.approx(1 / 3)
    # lexical matcher (token F1 >= 0.6): gold 1 matches "Who directed Jaws?" (F1 6/7),
    # gold 2 does not (best 4/7), gold 3 "who produced jaws" vs "who directed jaws" has
    # P = R = 2/3 -> F1 2/3 >= 0.6, a false match: 2 of 3
    assert METRICS["interp-recall-lex"](INTERP_EX, INTERP_PRED) == pytest.approx(2 / 3)


def test_grounding_metrics_through_the_scripted_lm_judge(use_lm):
    from ambiqa.evaluation.registry import judge_name

    lm = use_lm(scripted_lm({"VerifyInterpretation": _verify_rule}))
    # G-Precision: "Who directed Jaws?" is supported by its passage p1 ("directed"); "Who
    # scored Jaws?" is not supported by p2 ("released") -> 1/2
    assert METRICS["g-precision"](INTERP_EX, INTERP_PRED) == pytest.approx(1 / 2)
    # G-Recall: Q-bar = {generated "Who directed Jaws?" (verified)} + gold pairs grounded in the
    # annotated passages {"...directed the film...", "...novel..."}; "produced" is not
    # grounded -> |Q-bar| = 3. Recalled: the generated one by construction, the "directed"
    # gold by the cited passages; the "novel" gold is not in them -> 2/3
    assert METRICS["g-recall"](INTERP_EX, INTERP_PRED) == pytest.approx(2 / 3)
    # G-F1 = 2 (1/2)(2/3) / (1/2 + 2/3) = 4/7
    assert METRICS["g-f1"](INTERP_EX, INTERP_PRED) == pytest.approx(4 / 7)
    # verdicts are memoized: 2 (precision) + 3 (gold grounding) + 2 (gold vs model passages)
    assert lm.engine.count("VerifyInterpretation") == 7
    assert judge_name(["g-f1", "em"]) == "lm-judge:scripted/fake"
    assert judge_name(["em"]) is None


def test_ungrounded_recall_through_the_scripted_lm_matcher(use_lm):
    def rule(inp):
        return {"found": "directed" in inp["question"].lower()
                and "directed" in inp["candidates"].lower()}

    lm = use_lm(scripted_lm({MATCH_KEY: rule}))
    # only the "directed" gold finds a match among the 2 generated questions -> 1/3
    assert METRICS["interp-recall"](INTERP_EX, INTERP_PRED) == pytest.approx(1 / 3)
    assert lm.engine.count(MATCH_KEY) == 3  # one call per gold question, not per pair


def test_lm_judge_degrades_to_no_on_unparseable_verdicts(use_lm):
    from ambiqa.evaluation.judge import LMGroundingJudge

    use_lm(scripted_lm({"VerifyInterpretation": "no fields at all"}))
    judge = LMGroundingJudge()
    assert judge("Who directed Jaws?", "Spielberg", "Jaws was directed by Spielberg.") is False
    with dspy.context(lm=None):
        with pytest.raises(ConfigError):
            LMGroundingJudge()("Who directed Jaws?", "x", "some passage")
