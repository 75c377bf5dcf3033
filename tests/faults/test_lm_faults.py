"""LM faults behind the real ``dspy.LM`` path: transient errors are retried (bounded, with
backoff that honours retry-after, capped), every call has a deadline, an LM that stays
unreachable fails the question (issue 33: it is not answered around), a reply that does not
parse degrades the step, and each program degrades the way it documents, with the event in
the cost trace."""

from __future__ import annotations

import time

import dspy
import pytest
from dspy.utils.exceptions import LMAuthError, LMError

from ambiqa.lm import RetryPolicy, endpoint_lm
from ambiqa.programs.base import safe_step
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.signatures.answering import ClosedBookLongAnswer
from ambiqa.signatures.disambiguation import ClarifyFromPassages
from ambiqa.testing import SeededEncoder, scripted_lm
from ambiqa.tracing import track
from tests.faults.conftest import Faults, fast_policy, small_passages

pytestmark = pytest.mark.fault("LM faults")

OK = {"long_answer": "Louisa May Alcott wrote it."}
TRANSIENT = ["timeout", "builtin_timeout", "connection", "rate_limit", "server"]


def _predict_closed_book():
    return dspy.Predict(ClosedBookLongAnswer)(question="Who wrote Little Women?")


# ---- the policy itself ---------------------------------------------------------------------
def test_backoff_grows_is_capped_and_honours_retry_after():
    p = RetryPolicy(base_delay_s=0.5, max_delay_s=4.0, jitter=0.0)
    assert [p.delay(i) for i in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert p.delay(0, retry_after=2.5) == 2.5          # the server's wish, when reasonable
    assert p.delay(0, retry_after=3600) == 4.0         # ... capped: never park a run for an hour
    jittered = RetryPolicy(base_delay_s=1.0, max_delay_s=10, jitter=0.1)
    assert all(0.9 <= jittered.delay(0) <= 1.1 for _ in range(50))
    assert RetryPolicy(timeout_s=10, max_retries=2, max_delay_s=1).total_deadline() == 33


def test_policy_from_env(monkeypatch):
    monkeypatch.setenv("AMBIQA_LM_TIMEOUT", "7.5")
    monkeypatch.setenv("AMBIQA_LM_RETRIES", "5")
    p = RetryPolicy.from_env()
    assert (p.timeout_s, p.max_retries) == (7.5, 5)
    monkeypatch.setenv("AMBIQA_LM_RETRIES", "many")
    from ambiqa.errors import ConfigError

    with pytest.raises(ConfigError, match="AMBIQA_LM_RETRIES"):
        RetryPolicy.from_env()


# ---- transient faults through dspy.LM ------------------------------------------------------
@pytest.mark.parametrize("kind", TRANSIENT)
def test_transient_fault_is_retried_then_succeeds(kind, use_lm):
    sleeps: list[float] = []
    err = Faults.error(kind, retry_after=0.03 if kind == "rate_limit" else None)
    lm = use_lm(scripted_lm({"ClosedBookLongAnswer": Faults.sequence(err, err, OK)},
                            policy=fast_policy(max_retries=3), sleep=sleeps.append))
    with track() as t:
        out = _predict_closed_book()
    assert out.long_answer == OK["long_answer"]
    assert lm.engine.count("ClosedBookLongAnswer") == 3       # 2 failures + 1 success
    assert lm.engine.retries == 2 and len(sleeps) == 2
    assert t.lm_calls == 1 and t.lm_errors == 0                # one logical call, no error
    assert sum("lm.retry" in e for e in t.events) == 2
    if kind == "rate_limit":
        assert sleeps == [0.03, 0.03]                           # retry-after honoured
        assert "server asked 0.03 s" in t.events[0]
    else:
        assert sleeps[1] >= sleeps[0]                           # backoff grows


@pytest.mark.parametrize("kind", TRANSIENT)
def test_persistent_transient_fault_is_bounded_and_fails_the_step(kind, use_lm):
    sleeps: list[float] = []
    lm = use_lm(scripted_lm({"ClosedBookLongAnswer": Faults.error(kind, retry_after=999)},
                            policy=fast_policy(max_retries=2), sleep=sleeps.append))
    with track() as t, pytest.raises(LMError):    # no reply: not answered around (issue 33)
        safe_step("closed_book", _predict_closed_book, "DEGRADED")
    assert lm.engine.count("ClosedBookLongAnswer") == 3        # 1 + max_retries, no more
    assert all(s <= 0.05 for s in sleeps)                       # retry-after 999 s capped
    assert not any("degraded" in e for e in t.events)
    assert any(e.startswith("lm: gave up after 3 attempt(s)") for e in t.events)


def test_hung_call_hits_its_deadline_never_hangs(faults, use_lm):
    lm = use_lm(scripted_lm({"ClosedBookLongAnswer": faults.hang(OK)},
                            policy=fast_policy(timeout_s=0.3, max_retries=1)))
    with track() as t, pytest.raises(LMError):
        safe_step("closed_book", _predict_closed_book, "DEGRADED")
    # event-based: both attempts are still blocked inside the LM, so the deadline (not a
    # reply) ended them; a missing deadline would wait for the release and return OK
    assert faults.blocked == 2
    assert lm.engine.count("ClosedBookLongAnswer") == 2        # the timeout was retried once
    assert any("timeout" in e for e in t.events)


def test_timeouts_not_retried_when_policy_says_so(faults, use_lm):
    lm = use_lm(scripted_lm({"ClosedBookLongAnswer": faults.hang(OK)},
                            policy=fast_policy(timeout_s=0.2, retry_timeouts=False)))
    with pytest.raises(LMError):
        safe_step("x", _predict_closed_book, None)
    assert faults.blocked == 1                                  # cut by its deadline, not answered
    assert lm.engine.count("ClosedBookLongAnswer") == 1


def test_whole_call_deadline_bounds_retries(faults, use_lm):
    lm = use_lm(scripted_lm({"ClosedBookLongAnswer": faults.hang(OK)},
                            policy=fast_policy(timeout_s=0.3, max_retries=50, deadline_s=1.0)))
    with pytest.raises(LMError):
        safe_step("x", _predict_closed_book, None)
    calls = lm.engine.count("ClosedBookLongAnswer")
    assert 1 <= calls <= 5                                      # 1.0 s / 0.3 s, not 51 attempts
    assert faults.blocked == calls                              # every attempt cut, none answered


def test_auth_error_is_not_retried_and_not_hidden(use_lm):
    lm = use_lm(scripted_lm({"ClosedBookLongAnswer": Faults.error("auth")},
                            policy=fast_policy()))
    with pytest.raises(LMAuthError):
        safe_step("closed_book", _predict_closed_book, "DEGRADED")
    assert lm.engine.count("ClosedBookLongAnswer") == 1


# ---- bad replies ---------------------------------------------------------------------------
@pytest.mark.parametrize("reply", [
    "",                                                    # empty output
    "Sure! The answer is Louisa May Alcott.",              # not in the adapter's format
    "[[ ## pairs ## ]]\nnot a list at all\n\n[[ ## completed ## ]]",  # wrong type
], ids=["empty", "no_format", "wrong_type"])
def test_unparseable_reply_degrades_without_retry(reply, use_lm):
    lm = use_lm(scripted_lm({"ClarifyFromPassages": reply}, policy=fast_policy()))
    with track() as t:
        got = safe_step("clarify", lambda: dspy.Predict(ClarifyFromPassages)(
            question="q?", passages="[1] x"), "DEGRADED")
    assert got == "DEGRADED"
    # ChatAdapter, then DSPy's JSON fallback; no transport retries for a parse failure
    assert lm.engine.count("ClarifyFromPassages") == 2 and lm.engine.retries == 0
    assert any(e.startswith("clarify: degraded: AdapterParseError") for e in t.events)


def test_extremely_long_reply_is_cut_and_counted(use_lm):
    huge = "[[ ## long_answer ## ]]\n" + "word " * 1_000_000 + "\n\n[[ ## completed ## ]]"
    use_lm(scripted_lm({"ClosedBookLongAnswer": huge}, policy=fast_policy()))
    with track() as t:
        got = safe_step("closed_book", _predict_closed_book, None)
    # cut at 200k characters: parsed as a (truncated) answer or degraded, never 5 MB kept
    assert got is None or len(got.long_answer) <= 200_000
    assert t.truncated_calls >= 1
    assert any("cut to 200,000" in e for e in t.events)


# ---- programs degrade as documented, the event in the trace --------------------------------
def _diva_script(verify):
    return {
        "TypeAmbiguity": {"reason": "several readings", "ambiguity_type": "AmbObj"},
        "PseudoInterpretations": {"interpretations": ["Who played Ron?", "Who played Percy?"]},
        "VerifyRetrieval": verify,
        "ClarifyFromPassages": {"pairs": [{"question": "Who played Ron?", "answer": "Grint",
                                           "passage": 1}]},
        "WriteLongAnswer": {"long_answer": "From the passages."},
    }


def test_diva_keeps_the_rag_path_when_verification_does_not_parse(use_lm):
    """Unparseable verifications abstain; with no parsed vote Diva keeps its passages
    (issue 12 item 2)."""
    from ambiqa.programs.diva import Diva

    lm = use_lm(scripted_lm(_diva_script("no verdict in any format"), policy=fast_policy()))
    out = Diva(InMemoryRetriever(small_passages()), encoder=SeededEncoder())(
        question="Who played the Weasley brothers?")
    assert out.path == "rag" and out.answer == "From the passages."
    assert out.verdict == "Unverified"
    assert [v["supported"] for v in out.votes] == [None, None]
    assert any(e.startswith("verify: degraded: AdapterParseError")
               for e in out.trace["events"])
    assert any("every vote abstained" in e for e in out.trace["events"])
    assert lm.engine.retries == 0                          # a bad reply is not retried


def test_diva_fails_the_question_when_verification_is_unreachable(use_lm):
    """An LM that never replies fails the question; it is not an abstention (issue 33)."""
    from ambiqa.programs.diva import Diva

    lm = use_lm(scripted_lm(_diva_script(Faults.error("timeout")),
                            policy=fast_policy(max_retries=1), sleep=lambda s: None))
    with pytest.raises(LMError):
        Diva(InMemoryRetriever(small_passages()), encoder=SeededEncoder())(
            question="Who played the Weasley brothers?")
    assert lm.engine.count("VerifyRetrieval") >= 2         # retried (1 + 1) before failing
    assert lm.engine.count("WriteLongAnswer") == 0         # no answer written around it


def test_verdict_drops_the_passage_whose_reply_does_not_parse(use_lm):
    from ambiqa.programs.verdict import VerDICt

    def interpret(inputs):
        if "Paris" in inputs["passage"]:
            return "I would rather not say."
        return {"interpretation": "Who played Ron Weasley?", "answer": "Rupert Grint",
                "abstain": False}

    use_lm(scripted_lm({"RelaxQuery": {"relaxed_query": "Weasley actors Paris"},
                        "InterpretFromPassage": interpret,
                        "WriteLongAnswer": {"long_answer": "Rupert Grint played Ron."}},
                       policy=fast_policy(max_retries=1), sleep=lambda s: None))
    out = VerDICt(InMemoryRetriever(small_passages()), n_passages=6, encoder=SeededEncoder())(
        question="Who played the Weasley brothers?")
    assert out.n_dropped == 1 and out.grounded
    assert any(e.startswith("verdict.interpret[p3]: degraded: AdapterParseError")
               for e in out.trace["events"])


def test_resp_stops_planning_and_answers_when_the_plan_does_not_parse(use_lm):
    from ambiqa.programs.resp import ReSP

    use_lm(scripted_lm({
        "SummarizeGlobalEvidence": {"evidence": "Ron was played by Rupert Grint."},
        "SummarizeLocalPathway": {"answer": "Rupert Grint"},
        "JudgeSufficiency": {"sufficient": False},
        "PlanNextQuestion": "Next I would look things up.",
        "AnswerFromMemories": {"answer": "Rupert Grint"},
    }, policy=fast_policy(max_retries=1), sleep=lambda s: None))
    out = ReSP(InMemoryRetriever(small_passages()), k=2, max_iter=3)(
        question="Who played Ron Weasley?")
    assert out.stop_reason == "planner_unparseable" and out.answer == "Rupert Grint"
    assert out.iterations == 1
    assert any(e.startswith("resp.plan: degraded: AdapterParseError")
               for e in out.trace["events"])


def test_eor_drops_the_vote_of_a_member_whose_reader_reply_does_not_parse(use_lm):
    from ambiqa.programs.eor import EoR

    def reader(inputs):
        if inputs["passages"].startswith("(no passages)"):          # the ReFree member
            return "cannot help with that"
        return {"answer": "Rupert Grint"}

    use_lm(scripted_lm({"ShortAnswer": reader,
                        "BackgroundDocument": {"background": "Rupert Grint is an actor."}},
                       policy=fast_policy(max_retries=1), sleep=lambda s: None))
    out = EoR(InMemoryRetriever(small_passages()), pool=("Wiki@3", "PK", "ReFree"),
              encoder=SeededEncoder())(question="Who played Ron Weasley?")
    assert "ReFree" in out.failed_members and "ReFree" not in out.member_answers
    assert out.answer == "Rupert Grint" and out.winner in ("Wiki@3", "PK")
    assert any(e.startswith("eor: member ReFree dropped") for e in out.trace["events"])


# ---- endpoint LMs: the real HTTP path (LiteLLM / DSPy's client) ----------------------------
def _endpoint(url: str, **policy):
    return endpoint_lm("openai/fake", api_base=url, cache=False,
                       policy=fast_policy(**policy))


def test_endpoint_rate_limit_with_retry_after_then_ok(faulty_endpoint, use_lm):
    ep = faulty_endpoint([("429", 0.02), ("429", 0.02), "ok"])
    use_lm(_endpoint(ep.url, max_retries=3, max_delay_s=0.5))
    with track() as t:
        out = _predict_closed_book()
    assert out.long_answer and ep.requests == 3
    assert sum("lm.retry" in e and "rate_limit" in e for e in t.events) == 2


@pytest.mark.parametrize("script", [["503"], ["drop"]], ids=["server_error", "dropped"])
def test_endpoint_persistent_failure_fails_after_bounded_retries(script, faulty_endpoint,
                                                                  use_lm):
    ep = faulty_endpoint(script)
    use_lm(_endpoint(ep.url, max_retries=2))
    with track() as t, pytest.raises(LMError):
        safe_step("closed_book", _predict_closed_book, None)
    assert ep.requests == 3
    assert not any("degraded" in e for e in t.events)


def test_endpoint_connection_refused_fails(use_lm):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    use_lm(_endpoint(f"http://127.0.0.1:{port}/v1", max_retries=1))
    t0 = time.monotonic()
    with pytest.raises(LMError):
        safe_step("closed_book", _predict_closed_book, None)
    assert time.monotonic() - t0 < 10


def test_endpoint_slow_server_times_out(faulty_endpoint, use_lm):
    ep = faulty_endpoint(["hang"])
    lm = endpoint_lm("openai/fake", api_base=ep.url, cache=False, timeout=0.5,
                     policy=fast_policy(timeout_s=0.5, max_retries=1))
    use_lm(lm)
    with pytest.raises(LMError):
        safe_step("closed_book", _predict_closed_book, None)
    # event-based: both attempts reached the server and are still held there, so the
    # client's 0.5 s timeout ended them, not a reply
    assert ep.requests == 2 and ep.hanging == 2


def test_endpoint_garbage_and_huge_replies_degrade_or_cut(faulty_endpoint, use_lm):
    ep = faulty_endpoint(["garbage"])
    use_lm(_endpoint(ep.url))
    with track() as t:
        assert safe_step("clarify", lambda: dspy.Predict(ClarifyFromPassages)(
            question="q?", passages="[1] x"), None) is None
    assert any("AdapterParseError" in e for e in t.events)
    ep2 = faulty_endpoint([("huge", 1_000_000)])
    use_lm(_endpoint(ep2.url))
    with track() as t:
        safe_step("closed_book", _predict_closed_book, None)
    assert any("cut to 200,000" in e for e in t.events)
