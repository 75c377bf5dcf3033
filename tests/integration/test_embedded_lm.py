"""The real embedded model answers through DSPy, and the engine is locked down."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import dspy
import pytest

from ambiqa.signatures.answering import ClosedBookLongAnswer, ShortAnswer
from ambiqa.tracing import track

pytestmark = pytest.mark.integration


def test_embedded_lm_answers_through_dspy(embedded_lm, use_lm):
    use_lm(embedded_lm)
    with track() as t:
        out = dspy.Predict(ShortAnswer)(
            question="Who wrote the novel Little Women?",
            passages="[1] Little Women: Little Women is a novel by the American author Louisa "
                     "May Alcott, published in 1868.\n[2] Paris: Paris is the capital of France.")
    assert "alcott" in out.answer.lower()
    assert t.lm_calls >= 1 and t.input_tokens > 50 and t.output_tokens > 0
    assert t.by_module() == {"ShortAnswer": t.lm_calls}


def test_embedded_lm_writes_a_long_answer(embedded_lm, use_lm):
    use_lm(embedded_lm)
    out = dspy.Predict(ClosedBookLongAnswer)(question="Who wrote the novel Little Women?")
    assert len(out.long_answer.split()) >= 3


def test_embedded_server_port_requires_a_key(embedded_lm, use_lm):
    """xllamacpp always opens an HTTP port; ours binds loopback and demands a secret key."""
    use_lm(embedded_lm)
    engine = embedded_lm._engine_spec
    server = engine._ensure_server()
    address = server.listening_address
    assert address.startswith("http://127.0.0.1:")
    host, port = address.rsplit("/", 1)[-1].split(":")
    with socket.create_connection((host, int(port)), timeout=5):
        pass
    req = urllib.request.Request(address + "/v1/models")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 401


def test_embedded_slots_serve_concurrent_calls_and_report_cached_tokens(embedded_lm, use_lm):
    """Two calls at once go through llama.cpp's slots; a repeated prompt prefix is reported as
    cached (computed < prompt tokens), so the trace's computed-token accounting is real."""
    from ambiqa.parallel import run_parallel

    use_lm(embedded_lm)
    assert embedded_lm.engine.inner.settings.n_parallel >= 2
    predict = dspy.Predict(ShortAnswer)
    passages = ("[1] Little Women: Little Women is a novel by the American author Louisa May "
                "Alcott, published in 1868.\n[2] Paris: Paris is the capital of France.")
    with track() as t:
        outs = run_parallel(lambda q: predict(question=q, passages=passages),
                            ["Who wrote Little Women?", "What is the capital of France?"],
                            max_workers=2)
        predict(question="Who wrote the novel Little Women?", passages=passages)
    assert "alcott" in outs[0].answer.lower() and "paris" in outs[1].answer.lower()
    assert t.lm_calls == 3
    assert 0 < t.cached_tokens < t.input_tokens
    assert t.computed_tokens == t.input_tokens - t.cached_tokens
