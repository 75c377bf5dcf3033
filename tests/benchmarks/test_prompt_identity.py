"""benchmarks/prompt_identity.py: comparing two logs of LM requests (no git, no LM)."""

from __future__ import annotations

from benchmarks import prompt_identity as pi

SYSTEM = ("Your input fields are:\n1. `question` (str)\nYour output fields are:\n"
          "1. `{out}` (str)\nAll interactions will be structured...")


def _req(out: str, user: str, temperature: float = 0.3) -> dict:
    return {"model": "fake", "temperature": temperature, "max_completion_tokens": 300,
            "messages": [{"role": "system", "content": SYSTEM.format(out=out)},
                         {"role": "user", "content": user}]}


def test_the_same_requests_in_another_order_are_identical() -> None:
    old = [_req("reason", "q1"), _req("evidence", "a"), _req("evidence", "b")]
    res = pi.compare(old, list(reversed(old)))
    assert res["identical"] and not res["diffs"]
    assert res["signatures"] == {"reason": 1, "evidence": 2}  # output field, not input field


def test_a_changed_prompt_or_setting_is_shown_per_signature() -> None:
    old = [_req("reason", "q1"), _req("long_answer", "write it")]
    new = [_req("reason", "q1"), _req("long_answer", "write it", temperature=0.0)]
    res = pi.compare(old, new)
    assert not res["identical"] and res["only_old"] == res["only_new"] == 1
    assert list(res["diffs"]) == ["long_answer"]
    assert '- "temperature": 0.3' in res["diffs"]["long_answer"]
    assert '+ "temperature": 0.0' in res["diffs"]["long_answer"]
