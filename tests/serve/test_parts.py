"""The service's parts on their own: slots from the LM, supporting sentences, admission."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from ambiqa.errors import ConfigError
from ambiqa.serve.admission import Admission, DeadlineExceeded, QueueFull
from ambiqa.serve.evidence import answer_payload, split_sentences, supporting_sentence
from ambiqa.serve.loading import DEFAULT_ENDPOINT_SLOTS, choose_slots, lm_slots


def _embedded_like(n: int):
    return SimpleNamespace(engine=SimpleNamespace(settings=SimpleNamespace(n_parallel=n)))


def test_slots_follow_the_embedded_lm_and_default_for_endpoints():
    endpoint = SimpleNamespace(engine=SimpleNamespace())
    assert lm_slots(_embedded_like(3)) == 3 and lm_slots(endpoint) is None
    assert choose_slots(_embedded_like(2), None) == 2
    assert choose_slots(_embedded_like(2), 1) == 1
    with pytest.raises(ConfigError, match="exceeds the embedded LM's 2 slots"):
        choose_slots(_embedded_like(2), 3)
    assert choose_slots(endpoint, None) == DEFAULT_ENDPOINT_SLOTS
    assert choose_slots(endpoint, 16) == 16
    with pytest.raises(ConfigError):
        choose_slots(endpoint, 0)


def test_supporting_sentence_rules():
    text = ("Little Women is a 1933 film. Katharine Hepburn plays Jo March. "
            "It won an Academy Award.")
    assert split_sentences(text) == ["Little Women is a 1933 film.",
                                     "Katharine Hepburn plays Jo March.",
                                     "It won an Academy Award."]
    assert supporting_sentence(text, "Katharine Hepburn") == {
        "sentence": "Katharine Hepburn plays Jo March.", "how": "contains the answer"}
    # normalised as EM normalises: case, punctuation and articles do not matter
    assert supporting_sentence(text, "the academy award!")["sentence"] == \
        "It won an Academy Award."
    got = supporting_sentence(text, "Hepburn, Katharine (actress)")
    assert got == {"sentence": "Katharine Hepburn plays Jo March.",
                   "how": "shares words with the answer"}
    got = supporting_sentence(text, "unknown", question="Which award did it win?")
    assert got["how"] == "shares words with the question" and "Award" in got["sentence"]
    assert supporting_sentence(text, "zzz")["how"] == "first sentence"
    assert supporting_sentence("", "x")["how"] == "empty passage"


def test_payload_lists_cited_ids_that_were_not_read():
    pred = SimpleNamespace(
        answer="A", trace={"lm_calls": 1},
        passages=[{"id": "p1", "title": "T", "text": "Alpha is here. Beta too.", "score": 1.0}],
        interpretations=[{"question": "q?", "answer": "Beta", "passages": ["p1", "p9"]}])
    body = answer_payload(pred)
    it = body["interpretations"][0]
    assert it["passages"] == ["p1", "p9"] and it["unknown_ids"] == ["p9"]
    assert it["citations"][0]["supporting_sentence"] == "Beta too."


def test_admission_queue_deadline_and_release():
    async def scenario():
        adm = Admission(slots=1, queue=1, timeout_s=0.5)
        gate = asyncio.Event()

        async def blocked():
            await gate.wait()
            return "done"

        first = asyncio.create_task(adm.run(blocked))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(adm.run(blocked))  # waits in the one queue place
        await asyncio.sleep(0.01)
        assert (adm.running, adm.waiting) == (1, 1)
        with pytest.raises(QueueFull) as full:
            await adm.run(blocked)
        assert full.value.retry_after_s >= 1
        with pytest.raises(DeadlineExceeded, match="still running"):
            await first
        with pytest.raises(DeadlineExceeded, match="waiting for a free slot"):
            await second
        assert adm.running == 1  # the abandoned first call keeps its slot
        gate.set()
        await asyncio.sleep(0.05)
        assert adm.running == 0 and adm.sem.locked() is False
        assert await adm.run(blocked) == "done"
        assert (adm.refused, adm.timed_out) == (1, 2)

    asyncio.run(scenario())
