"""Admission is exact (issue 42): however requests interleave on the event loop, at most
``slots + queue`` are in at once, and a place reserved for a call that never ran is given
back."""

from __future__ import annotations

import asyncio

import pytest

from ambiqa.serve.admission import Admission, QueueFull


def test_calls_started_together_are_admitted_up_to_slots_plus_queue():
    async def scenario() -> tuple[list, int, Admission]:
        adm = Admission(slots=2, queue=3, timeout_s=30)
        peak = 0

        async def call() -> str:
            nonlocal peak
            peak = max(peak, adm.admitted)
            await asyncio.sleep(0.05)
            return "ok"

        got = await asyncio.gather(*(adm.run(call) for _ in range(20)),
                                   return_exceptions=True)
        return got, peak, adm

    got, peak, adm = asyncio.run(scenario())
    assert sum(g == "ok" for g in got) == 5
    assert sum(isinstance(g, QueueFull) for g in got) == 15
    assert peak <= 5 and adm.admitted == 0 and (adm.served, adm.refused) == (5, 15)


def test_a_reserved_place_is_given_back_once_if_its_call_never_runs():
    async def scenario() -> Admission:
        adm = Admission(slots=1, queue=0, timeout_s=30)
        place = adm.reserve()
        with pytest.raises(QueueFull):
            adm.reserve()  # the reserved place counts at once
        task = asyncio.ensure_future(adm.run(lambda: asyncio.sleep(0), place=place))
        task.add_done_callback(lambda _: place.release())
        task.cancel()  # cancelled before its first step: run() never took the place
        with pytest.raises(asyncio.CancelledError):
            await task
        place.release()  # idempotent
        assert adm.admitted == 0
        await adm.run(lambda: asyncio.sleep(0))  # the place is free again
        return adm

    adm = asyncio.run(scenario())
    assert adm.admitted == 0 and adm.served == 1
