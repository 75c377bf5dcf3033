"""One evaluate run decides each thing once (issue 44, item 2): the LM passed down as an
``LMSpec`` and built once after the cheap checks, one frozen ``EvaluatePlan``, one way to
install tracing."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import Any

import dspy
import pytest

import ambiqa.api.plan
import ambiqa.api.targets
import ambiqa.programs.registry
from ambiqa.api import EvaluateSettings, LMSpec, evaluate
from ambiqa.api.plan import plan_evaluate
from ambiqa.errors import ConfigError
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import vanilla_rag_lm
from ambiqa.tracing import TraceCallback, UsageTap, traced
from ambiqa.types import Passage


@pytest.fixture()
def questions(tmp_path: Path) -> str:
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "Capital of France?", "answers": ["Paris"]}\n')
    return f"jsonl:{path}"


@pytest.fixture()
def retriever() -> InMemoryRetriever:
    return InMemoryRetriever([Passage("p1", "Paris", "Paris is the capital of France.")])


@pytest.fixture()
def built(monkeypatch) -> list[LMSpec]:
    """Every LM a spec builds, recorded (a scripted LM instead of a model)."""
    specs: list[LMSpec] = []

    def build(self: LMSpec) -> Any:
        specs.append(self)
        return vanilla_rag_lm()

    monkeypatch.setattr(LMSpec, "build", build)
    saved = dspy.settings.lm
    yield specs
    dspy.configure(lm=saved)


def test_a_spec_settles_its_model_once(monkeypatch):
    monkeypatch.setenv("AMBIQA_LM", "embedded:qwen2.5-coder-0.5b")
    spec = LMSpec(max_tokens=256).resolved()
    monkeypatch.setenv("AMBIQA_LM", "openai/other")  # read once: a later change is not seen
    assert spec.model == spec.name == "embedded:qwen2.5-coder-0.5b"
    assert spec.max_tokens == 256 and LMSpec.of("openai/x").model == "openai/x"
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.model = "x"  # type: ignore[misc]


def test_a_typo_fails_before_the_spec_is_built(questions, retriever, built):
    with pytest.raises(ConfigError, match="did you mean"):
        evaluate("vanilla_rag", questions, metrics=["rouge-k"], lm=LMSpec(),
                 retriever=retriever)
    with pytest.raises(ConfigError, match="did you mean"):
        evaluate("vanila_rag", questions, lm="embedded", retriever=retriever)
    assert built == []


def test_one_run_decides_each_thing_once(questions, retriever, built, tmp_path, monkeypatch):
    calls: Counter[str] = Counter()
    real = ambiqa.programs.registry.program_class

    def counted(name: str) -> type:
        calls["program_class"] += 1
        return real(name)

    for module in (ambiqa.api.plan, ambiqa.api.targets, ambiqa.programs.registry):
        monkeypatch.setattr(module, "program_class", counted)
    real_check = EvaluateSettings.check

    def check(self: EvaluateSettings) -> None:
        calls["check"] += 1
        real_check(self)

    monkeypatch.setattr(EvaluateSettings, "check", check)
    out = tmp_path / "run"
    result = evaluate("vanilla_rag", questions, metrics="em,f1", out=out, retriever=retriever,
                      lm=LMSpec(model="embedded:qwen2.5-coder-0.5b"))
    assert result.n == 1
    assert calls == {"program_class": 1, "check": 1} and len(built) == 1
    # run.json records the LM from the spec (never read back from DSPy's settings)
    assert json.loads((out / "run.json").read_text())["lm"] == "embedded:qwen2.5-coder-0.5b"


def test_the_plan_is_frozen_and_holds_every_decision(questions, retriever, tmp_path):
    cfg = EvaluateSettings(metrics="dr", out=tmp_path / "run")
    plan = plan_evaluate("vanilla_rag", questions, cfg, lm="embedded", retriever=retriever)
    assert plan.kind == "name" and plan.program_class.__name__ == "VanillaRAG"
    assert "dr" in plan.metrics and len(plan.metrics) > 1  # DR brings its parts, once
    assert isinstance(plan.lm, LMSpec) and plan.run_spec.lm == "embedded"
    assert plan.stored_run is None and plan.program_file is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.kind = "file"  # type: ignore[misc]


def test_a_flag_check_names_what_the_caller_typed():
    with pytest.raises(ConfigError, match="--threads must be at least 1"):
        EvaluateSettings(threads=0, spelled={"threads": "--threads"}).check()
    with pytest.raises(ConfigError, match="^threads must be at least 1"):
        EvaluateSettings(threads=0).check()
    with pytest.raises(ConfigError, match="finite"):
        EvaluateSettings(timeout_s=float("nan")).check()


def test_tracing_is_installed_one_way_beside_the_users_own():
    class Mine:
        pass

    mine, tracker = Mine(), object()
    settings = traced([mine], tracker)
    callbacks = settings["callbacks"]
    assert callbacks[0] is mine and sum(isinstance(c, TraceCallback) for c in callbacks) == 1
    assert isinstance(settings["usage_tracker"], UsageTap)
    assert settings["usage_tracker"].inner is tracker
    again = traced(callbacks, settings["usage_tracker"])  # already traced: nothing doubled
    assert again["callbacks"] == callbacks and again["usage_tracker"] is settings["usage_tracker"]
