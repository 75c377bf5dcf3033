"""``CappedLM``: the embedded LM whose calls carry their signature's output cap.

Each signature states the most output tokens its reply needs (``output_cap_tokens``); the
engine applies the cap (:class:`~ambiqa.lm.resilience.ResilientEngine`). Applied only there,
below DSPy, the cap never reached DSPy's response cache key: a run after a cap changed was
answered with the replies made under the old cap (issue 42's rule: the cache keys on
everything that changes an answer). Found when VerifyRetrievalBrief's cap was tried at 128
instead of 64 and a 60-question run replayed all 419 calls, the 52 cut at 64 tokens among
them.

So the cap travels as the call's ``max_tokens`` (the lower of it and the LM's own), which DSPy
keys on. Replies cached before this change, keyed without the cap, no longer replay for
capped signatures; they are asked anew.
"""

from __future__ import annotations

from typing import Any

import dspy

from ambiqa.tracing import current_output_cap


class CappedLM(dspy.LM):
    """A ``dspy.LM`` whose every call carries the running signature's output cap as its
    ``max_tokens`` (when lower), so that the response cache keys on it."""

    def _capped(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        cap = current_output_cap()
        if not cap:
            return kwargs
        current = kwargs.get("max_tokens", self.kwargs.get("max_tokens"))
        if current is None or current > cap:
            return {**kwargs, "max_tokens": cap}
        return kwargs

    def __call__(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        return super().__call__(prompt, messages=messages, **self._capped(kwargs))

    async def acall(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        return await super().acall(prompt, messages=messages, **self._capped(kwargs))
