"""DSPy's habits kept, each through the real ``dspy.LM`` path (scripted engine):

* ambiqa's tracing is added beside the callbacks a user installed, never instead;
* ``pred.trace`` counts LM calls however the LM was configured (plain ``dspy.configure``);
* a program accepts any callable ``query, k -> passages`` and a ``dspy.Retrieve``;
* ``save(save_program=True)`` is refused with a one-line reason;
* ``ambiqa.load`` accepts the JSON a program's own ``.save()`` wrote.
"""

from __future__ import annotations

import dspy
import pytest
from dspy.utils.callback import BaseCallback

import ambiqa
from ambiqa.errors import ConfigError
from ambiqa.testing import vanilla_rag_lm

DOCS = {"Paris": "Paris is the capital of France.", "Lyon": "Lyon is a city in France."}


class Recorder(BaseCallback):
    """What an MLflow/Langfuse autologger is to DSPy: a callback counting what it sees."""

    def __init__(self) -> None:
        self.lm_ends = 0
        self.module_starts = 0

    def on_lm_end(self, call_id, outputs, exception=None):
        self.lm_ends += 1

    def on_module_start(self, call_id, instance, inputs):
        self.module_starts += 1


def search(query: str, k: int) -> list[dict]:
    """A user's own retriever: a plain function returning dicts."""
    return [{"title": t, "text": x} for t, x in DOCS.items()][:k]


def test_plain_dspy_configure_traces_and_keeps_user_callback(fresh_dspy):
    user = Recorder()
    dspy.configure(lm=vanilla_rag_lm(), callbacks=[user])
    prog = ambiqa.VanillaRAG(retriever=search, k=2)
    pred = prog(question="What is the capital of France?")
    assert pred.trace["lm_calls"] == 2 and pred.trace["retriever_calls"] == 1
    assert user.lm_ends == 2 and user.module_starts >= 3  # program + 2 predictors
    assert dspy.settings.callbacks == [user]  # nothing replaced or left behind


def test_ambiqa_configure_adds_tracing_beside_user_callbacks(fresh_dspy):
    from ambiqa.tracing import TraceCallback

    user = Recorder()
    dspy.configure(callbacks=[user])
    ambiqa.configure(vanilla_rag_lm())
    callbacks = dspy.settings.callbacks
    assert callbacks[0] is user and sum(isinstance(c, TraceCallback) for c in callbacks) == 1
    ambiqa.configure(dspy.settings.lm)  # configuring twice adds nothing twice
    assert len(dspy.settings.callbacks) == 2
    pred = ambiqa.VanillaRAG(retriever=search, k=2)(question="Capital of France?")
    assert pred.trace["lm_calls"] == 2 and user.lm_ends == 2


def test_user_usage_tracker_still_receives_usage(fresh_dspy):
    dspy.configure(lm=vanilla_rag_lm())
    with dspy.track_usage() as usage:
        pred = ambiqa.VanillaRAG(retriever=search, k=2)(question="Capital of France?")
    assert pred.trace["lm_calls"] == 2
    assert usage.get_total_tokens()  # the user's tracker saw the calls too


def test_callable_retriever_ids_are_stable_and_cited(use_lm):
    use_lm(vanilla_rag_lm())
    prog = ambiqa.VanillaRAG(retriever=search, k=2)
    a = prog(question="What is the capital of France?")
    b = prog(question="Which city is in France?")
    assert [p["title"] for p in a.passages] == ["Paris", "Lyon"]
    assert [p["id"] for p in a.passages] == [p["id"] for p in b.passages]  # same text, same id
    assert a.interpretations[0]["passages"] == [a.passages[0]["id"]]


def test_dspy_retrieve_as_retriever(use_lm):
    class RM:
        def __call__(self, query, k=3, **_):
            return [dspy.Prediction(long_text=f"{t} | {x}") for t, x in DOCS.items()][:k]

    use_lm(vanilla_rag_lm())
    with dspy.context(rm=RM()):
        pred = ambiqa.VanillaRAG(retriever=dspy.Retrieve(k=2), k=2)(question="Capital?")
    assert len(pred.passages) == 2 and pred.passages[0]["text"].startswith("Paris |")
    assert pred.trace["retriever_calls"] == 1


def test_a_retriever_of_the_wrong_kind_is_named():
    with pytest.raises(ConfigError, match="got int"):
        ambiqa.VanillaRAG(retriever=3)


def test_save_program_true_is_refused_in_one_line(tmp_path):
    prog = ambiqa.VanillaRAG(retriever=search)
    with pytest.raises(ConfigError) as err:
        prog.save(str(tmp_path / "prog"), save_program=True)
    assert "\n" not in err.value.message and "pickle" in err.value.message
    assert not (tmp_path / "prog").exists()


def test_load_accepts_a_programs_own_save(tmp_path, use_lm):
    use_lm(vanilla_rag_lm())
    prog = ambiqa.VanillaRAG(retriever=search, k=2)
    demo = dspy.Example(question="Q?", passages="[1] P", pairs=[]).with_inputs("question")
    first = prog.named_predictors()[0][1]
    first.demos = [demo]
    path = tmp_path / "rag.json"
    prog.save(str(path))
    loaded = ambiqa.load(path, retriever=search)
    assert type(loaded) is type(prog) and loaded.k == 2
    assert loaded.dump_state() == prog.dump_state()
    assert loaded(question="Capital of France?").trace["lm_calls"] == 2
    plain = tmp_path / "plain.json"  # what dspy.Module.save writes, without ambiqa's entry
    dspy.Module.save(prog, str(plain))
    with pytest.raises(ambiqa.errors.ArtifactError, match="program="):
        ambiqa.load(plain, retriever=search)
    bare = ambiqa.load(plain, retriever=search, program="vanilla_rag")
    assert bare.k == 5  # a plain DSPy save holds prompts and demos, not settings: defaults
    assert bare.named_predictors()[0][1].demos[0]["question"] == "Q?"


def test_a_trace_says_when_it_cannot_count(fresh_dspy):
    class NotABaseLM:  # an LM object DSPy's callbacks never see
        def __call__(self, *args, **kwargs):
            raise AssertionError("not called")

    dspy.configure(lm=NotABaseLM())
    from ambiqa.tracing import untraced_lm_reason

    assert "not a dspy.BaseLM" in untraced_lm_reason()
    dspy.configure(lm=vanilla_rag_lm())
    assert untraced_lm_reason() is None
    assert "untraced" not in ambiqa.VanillaRAG(retriever=search)(question="Capital?").trace
