"""Embedded model assembly (atomic, verified), LM specs, and cost tracing."""

from __future__ import annotations

import hashlib
import sys
import time
import types

import pytest

from ambiqa import lm as L
from ambiqa.errors import ConfigError, ModelError
from ambiqa.parallel import run_parallel
from ambiqa.testing import scripted_lm
from ambiqa.tracing import CallRecord, CostTrace, record_event, track


def _fake_parts(tmp_path, monkeypatch, chunks: list[bytes], name="fake_model_part{i}"):
    for i, data in enumerate(chunks, start=1):
        f = tmp_path / f"part{i}.bin"
        f.write_bytes(data)
        mod = types.ModuleType(name.format(i=i))
        mod.get_part_path = (lambda p: (lambda: str(p)))(f)
        monkeypatch.setitem(sys.modules, name.format(i=i), mod)
    blob = b"".join(chunks)
    return L.EmbeddedModel(name="fake", module_pattern=name, n_parts=len(chunks), size=len(blob),
                           sha256=hashlib.sha256(blob).hexdigest(), install_hint="pip install x")


def test_assemble_concatenates_verifies_and_reuses(tmp_path, monkeypatch):
    spec = _fake_parts(tmp_path, monkeypatch, [b"abc", b"def", b"g"])
    monkeypatch.setitem(L.EMBEDDED_MODELS, "fake", spec)
    out = L.assemble_model("fake", cache_dir=tmp_path / "cache")
    assert out.read_bytes() == b"abcdefg"
    mtime = out.stat().st_mtime_ns
    time.sleep(0.01)
    assert L.assemble_model("fake", cache_dir=tmp_path / "cache").stat().st_mtime_ns == mtime
    assert not [p for p in out.parent.iterdir() if p.name.endswith(".part")]


def test_hash_mismatch_is_refused_and_leaves_nothing(tmp_path, monkeypatch):
    spec = _fake_parts(tmp_path, monkeypatch, [b"abc", b"def"])
    bad = L.EmbeddedModel(**{**spec.__dict__, "sha256": "0" * 64})
    monkeypatch.setitem(L.EMBEDDED_MODELS, "fake", bad)
    with pytest.raises(ModelError, match="sha256"):
        L.assemble_model("fake", cache_dir=tmp_path / "cache")
    assert list((tmp_path / "cache" / "models").iterdir()) == []


def test_missing_part_names_the_package(tmp_path, monkeypatch):
    spec = L.EmbeddedModel(name="ghost", module_pattern="ghost_part_{i}", n_parts=2, size=1,
                           sha256="0", install_hint="pip install 'ambiqa[ghost]'")
    monkeypatch.setitem(L.EMBEDDED_MODELS, "ghost", spec)
    with pytest.raises(ModelError, match=r"part 1/2 \(ghost_part_1\)") as err:
        L.assemble_model("ghost", cache_dir=tmp_path)
    assert "ambiqa[ghost]" in str(err.value)


def test_lm_specs():
    with pytest.raises(ConfigError, match="unknown embedded model"):
        L.make_lm("embedded:nope")
    with pytest.raises(ConfigError, match="neither"):
        L.make_lm("gpt4")
    with pytest.raises(ConfigError, match="NO_SUCH_KEY_VAR"):
        L.make_lm("openai/gpt-4o-mini", api_key_env="NO_SUCH_KEY_VAR")


def test_endpoint_lm_never_exposes_the_key(monkeypatch):
    monkeypatch.setenv("AMBIQA_TEST_KEY", "sk-secret-123")
    lm = L.make_lm("openai/gpt-4o-mini", api_key_env="AMBIQA_TEST_KEY")
    assert "sk-secret-123" not in str(lm.dump_state())
    assert L.lm_id(lm) == "openai/gpt-4o-mini"


def test_trace_counts_tokens_modules_and_parallel_calls(use_lm):
    import dspy

    from ambiqa.signatures.answering import ClosedBookLongAnswer

    use_lm(scripted_lm({"ClosedBookLongAnswer": {"long_answer": "x y z"}}, delay_s=0.2))
    predict = dspy.Predict(ClosedBookLongAnswer)
    with track() as outer:
        with track() as inner:
            predict(question="q1")
        run_parallel(lambda q: predict(question=q), ["a", "b", "c", "d"], max_workers=4)
        record_event("step", "degraded: test")
    assert inner.lm_calls == 1 and outer.lm_calls == 5
    assert outer.by_module() == {"ClosedBookLongAnswer": 5}
    assert outer.input_tokens > 0 and outer.output_tokens > 0
    assert outer.events == ["step: degraded: test"]
    # four 0.2 s calls in parallel: critical path well under their summed latency
    assert outer.critical_path_s < outer.lm_latency_s * 0.7


def test_critical_path_merges_overlapping_intervals():
    t = CostTrace()
    for s, e in [(0, 2), (1, 3), (5, 6)]:
        t.add(CallRecord(kind="lm", start=s, end=e, latency_s=e - s))
    assert t.critical_path_s == pytest.approx(4.0)
    assert t.lm_latency_s == pytest.approx(5.0)


def test_truncated_replies_are_counted(use_lm):
    import dspy
    from dspy.lm15 import Message, Response, TextPart, Usage

    from ambiqa.signatures.answering import ClosedBookLongAnswer
    from ambiqa.tracing import note_finish_reason

    class Truncating:
        def complete(self, request):
            note_finish_reason("length")
            return Response(id=None, model="t", message=Message.assistant(TextPart(
                "[[ ## long_answer ## ]]\ncut off mid")), finish_reason="length",
                usage=Usage(input_tokens=10, output_tokens=5))

        def close(self):
            pass

    use_lm(dspy.LM("local/trunc", engine=Truncating(), cache=False, num_retries=0))
    with track() as t:
        dspy.Predict(ClosedBookLongAnswer)(question="q")
    assert t.truncated_calls >= 1
