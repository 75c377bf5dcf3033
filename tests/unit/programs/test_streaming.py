"""A program's answer as it is written (issue 43): ``prog.astream`` and ``dspy.streamify`` on
every program without naming a predictor, through the fake OpenAI-compatible server's
server-sent events and through the scripted LM."""

from __future__ import annotations

import asyncio

import dspy
import pytest

import ambiqa  # noqa: F401  (LITELLM_LOCAL_MODEL_COST_MAP before LiteLLM loads)
from ambiqa import testing_server
from ambiqa.data import demo_corpus_path, load_corpus
from ambiqa.lm import RetryPolicy, endpoint_lm
from ambiqa.programs.registry import build_program
from ambiqa.programs.streaming import AnswerChunk, AnswerRestart, Evidence, FieldReader
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import HashEncoder, scripted_lm, vanilla_rag_lm

QUESTION = "Who wrote Hamlet?"


@pytest.fixture(scope="module")
def retriever():
    return InMemoryRetriever(load_corpus(demo_corpus_path()))


@pytest.fixture(scope="module")
def fake_lm():
    url, shutdown = testing_server.serve(delay=0.01, chunk_delay=0.001)
    yield endpoint_lm("openai/fake", api_base=url, cache=False)
    shutdown()


def collect(prog, lm, question=QUESTION):
    async def run():
        with dspy.context(lm=lm):
            return [event async for event in prog.astream(question=question)]

    return asyncio.run(run())


def streamify(prog, lm, question=QUESTION, **kwargs):
    async def run():
        out = []
        with dspy.context(lm=lm):
            async for value in dspy.streamify(prog, **kwargs)(question=question):
                out.append(value)
        return out

    return asyncio.run(run())


# ---- reading the answer field out of a stream ------------------------------------------
REPLY = "[[ ## long_answer ## ]]\nParis [1] is big [[x]].\n\n[[ ## completed ## ]]"


@pytest.mark.parametrize("split", ["pieces", "characters", "whole"])
def test_field_reader_gives_the_field_whatever_the_cut(split):
    pieces = {"pieces": testing_server.stream_pieces(REPLY), "characters": list(REPLY),
              "whole": [REPLY]}[split]
    reader = FieldReader("long_answer")
    out = [reader.feed(p) for p in pieces] + [reader.finish()]
    assert "".join(out) == "Paris [1] is big [[x]]."
    assert not any("##" in o or "completed" in o for o in out)


def test_field_reader_skips_other_fields_and_reads_json():
    reader = FieldReader("long_answer")
    text = "[[ ## reason ## ]]\nno\n\n[[ ## long_answer ## ]]\nYes.\n\n[[ ## x ## ]]\nz"
    assert "".join([reader.feed(c) for c in text] + [reader.finish()]) == "Yes."
    reader = FieldReader("answer")
    text = '{"answer": "Ada \\"the\\" first", "other": 1}'
    out = [reader.feed(c) for c in text] + [reader.finish()]
    assert "".join(out) == 'Ada "the" first' and len([o for o in out if o]) > 3


# ---- which predictor writes the answer -------------------------------------------------
WRITERS = {
    ("vanilla_rag", "long"): ["long_answer.write"],
    ("vanilla_rag", "short"): ["short_answer.answer"],
    ("closed_book", "long"): ["answer_step.answer"],
    ("query_refinement", "long"): ["long_answer.write"],
    ("diva", "long"): ["long_answer.write", "closed_book.answer"],
    ("toc", "long"): ["long_answer.write"],
    ("verdict", "long"): ["write_long_answer.write", "closed_book.answer"],
    ("resp", "long"): ["generate"],
    ("ircot", "long"): ["read"],
    ("eor", "long"): [],  # a voted answer: nothing to stream before the vote
}


@pytest.mark.parametrize("name,form", sorted(WRITERS))
def test_every_program_names_its_answer_writers(name, form, retriever):
    from ambiqa.programs.registry import PROGRAMS

    assert {n for n, _ in WRITERS} == set(PROGRAMS)
    cfg = {"answer_form": "short"} if form == "short" else {}
    prog = build_program(name, retriever=retriever, **cfg)
    assert [n for n, _, _ in prog.answer_writers()] == WRITERS[(name, form)]
    listeners = prog.stream_listeners()
    assert [x.predict_name for x in listeners] == WRITERS[(name, form)]


def test_writers_survive_save_and_load(tmp_path, retriever):
    prog = build_program("diva", retriever=retriever)
    prog.save(str(tmp_path / "p.json"))
    loaded = ambiqa.load(str(tmp_path / "p.json"), retriever=retriever)
    assert [n for n, _, _ in loaded.answer_writers()] == WRITERS[("diva", "long")]


# ---- astream over the fake server ------------------------------------------------------
@pytest.mark.parametrize("name,cfg", [("vanilla_rag", {}),
                                      ("vanilla_rag", {"answer_form": "short"}),
                                      ("closed_book", {}), ("query_refinement", {}),
                                      ("resp", {}), ("ircot", {})])
def test_astream_yields_evidence_then_the_answer_as_written_then_the_prediction(
        name, cfg, retriever, fake_lm):
    events = collect(build_program(name, retriever=retriever, **cfg), fake_lm)
    pred = events[-1]
    assert isinstance(pred, dspy.Prediction)
    chunks = [e for e in events if isinstance(e, AnswerChunk)]
    assert len(chunks) > 1, events  # word by word, not the whole reply at once
    assert "".join(map(str, chunks)) == pred.answer
    evidence = [e for e in events if isinstance(e, Evidence)]
    if evidence:  # known before the answer, and what the Prediction has
        assert events.index(evidence[-1]) < events.index(chunks[0])
        assert evidence[-1].interpretations == pred.interpretations or name in ("resp",
                                                                                 "ircot")
        assert evidence[-1].passages == pred.passages
    elif name not in ("closed_book", "query_refinement"):
        pytest.fail(f"{name} announced no evidence")
    stream = pred.trace["stream"]
    assert stream["answer_chunks"] == len(chunks) and stream["restarts"] == 0
    assert 0 < stream["first_chunk_s"] <= stream["total_s"]


def test_astream_on_diva_and_verdict_with_a_stand_in_encoder(retriever, fake_lm):
    for name in ("diva", "verdict", "toc"):
        prog = build_program(name, retriever=retriever)
        for _, module in prog.named_sub_modules():
            if hasattr(module, "encoder"):
                module.encoder = HashEncoder()
        events = collect(prog, fake_lm)
        chunks = [e for e in events if isinstance(e, AnswerChunk)]
        assert chunks and "".join(map(str, chunks)) == events[-1].answer, name


def test_eor_streams_no_candidate_answer(retriever, fake_lm):
    prog = build_program("eor", retriever=retriever)
    for _, module in prog.named_sub_modules():
        if hasattr(module, "encoder"):
            module.encoder = HashEncoder()
    events = collect(prog, fake_lm)
    assert not [e for e in events if isinstance(e, AnswerChunk)]
    assert events[-1].answer and events[-1].trace["stream"]["first_chunk_s"] is None


def test_astream_with_the_scripted_lm_gives_the_answer_in_one_chunk(retriever):
    # behind ResilientEngine (as every LM make_lm builds): the reply comes whole, one chunk
    lm = vanilla_rag_lm(policy=RetryPolicy(timeout_s=10))
    events = collect(build_program("vanilla_rag", retriever=retriever, k=3), lm)
    chunks = [str(e) for e in events if isinstance(e, AnswerChunk)]
    assert chunks == [events[-1].answer] and chunks[0].startswith("Answers: ")
    # a plain engine, not ambiqa's: no chunks, the evidence and the Prediction all the same
    events = collect(build_program("vanilla_rag", retriever=retriever, k=3), vanilla_rag_lm())
    assert [type(e).__name__ for e in events] == ["Evidence", "Prediction"]


def test_a_writer_called_again_restarts_the_answer(retriever):
    lm = scripted_lm({"ShortAnswerOrUnknown": {"answer": "unknown"},
                      "ShortAnswer": {"answer": "William Shakespeare"}},
                     policy=RetryPolicy(timeout_s=10))
    prog = build_program("vanilla_rag", retriever=retriever, answer_form="short",
                         recall_fallback=True)
    events = collect(prog, lm)
    kinds = [type(e).__name__ for e in events if not isinstance(e, Evidence)]
    assert kinds == ["AnswerChunk", "AnswerRestart", "AnswerChunk", "Prediction"]
    assert str(events[-2]) == events[-1].answer == "William Shakespeare"
    assert isinstance(events[-3], AnswerRestart)
    assert events[-1].trace["stream"]["restarts"] == 1


def test_astream_raises_the_programs_failure(retriever):
    lm = scripted_lm({"ClarifyFromPassages": dspy.utils.exceptions.LMAuthError("bad key"),
                      "WriteLongAnswer": {"long_answer": "x"}})
    with pytest.raises(Exception, match="bad key"):
        collect(build_program("vanilla_rag", retriever=retriever), lm)


# ---- dspy.streamify, no predictor named ------------------------------------------------
@pytest.mark.parametrize("is_async_program", [False, True])
@pytest.mark.parametrize("name", ["vanilla_rag", "diva", "resp"])
def test_dspy_streamify_streams_the_answer_without_naming_a_predictor(
        name, is_async_program, retriever, fake_lm):
    prog = build_program(name, retriever=retriever)
    for _, module in prog.named_sub_modules():
        if hasattr(module, "encoder"):
            module.encoder = HashEncoder()
    out = streamify(prog, fake_lm, is_async_program=is_async_program)
    chunks = [v for v in out if isinstance(v, dspy.streaming.StreamResponse)]
    final = out[-1]
    assert isinstance(final, dspy.Prediction)
    assert len(chunks) > 1  # before issue 43: 0 chunks and no error
    assert "".join(c.chunk for c in chunks) == final.answer
    assert {c.predict_name for c in chunks} <= {n for n, _, _ in prog.answer_writers()}


def test_dspy_streamify_with_the_programs_listeners(retriever, fake_lm):
    prog = build_program("diva", retriever=retriever)
    for _, module in prog.named_sub_modules():
        if hasattr(module, "encoder"):
            module.encoder = HashEncoder()
    out = streamify(prog, fake_lm, stream_listeners=prog.stream_listeners())
    chunks = [v for v in out if isinstance(v, dspy.streaming.StreamResponse)]
    assert len(chunks) > 1
    assert "".join(c.chunk for c in chunks).strip() == out[-1].answer
