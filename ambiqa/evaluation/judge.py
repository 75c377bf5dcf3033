"""LM judges for the grounding and interpretation metrics of VerDICt (App. A).

VerDICt scores interpretations with an LLM judge in two roles:

* V(q, p) -- does this passage answer this (disambiguated) question? Used by G-Precision and
  G-Recall. :class:`LMGroundingJudge` asks the configured LM through the existing
  :class:`~ambiqa.signatures.verification.VerifyInterpretation` signature (the same question
  Diva's verification step asks), one passage or one numbered passage list per call.
* V(q, Q) -- does this list of questions contain one that asks the same thing as q? Used by
  the ungrounded interpretation recall. :class:`LMMatcher` asks it through
  :class:`MatchInterpretation`, one call per question against the whole list (App. A eq. 17:
  a pairwise judge would cost |Q^| x |Q~| calls).

Both remember their verdicts (bounded, per LM) because G-Precision, G-Recall and G-F1 ask the
same questions about the same passages, and both name themselves (``name``) so a report can
say which model judged. An unparseable verdict counts as "no" and is recorded as a trace
event: a judge that cannot answer must not inflate a score.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, ClassVar

import dspy

from ambiqa.errors import ConfigError
from ambiqa.lm import lm_id
from ambiqa.lm.failures import lm_failure_in
from ambiqa.signatures.verification import VerifyInterpretation
from ambiqa.tracing import record_event


class MatchInterpretation(dspy.Signature):
    """Decide whether a list of questions already contains the given question.

    A listed question counts as the same when it asks for the same fact about the same
    thing, even in other words; a broader, narrower or different question does not count."""

    output_cap_tokens: ClassVar[int] = 48

    question: str = dspy.InputField(desc="the question to look for")
    candidates: str = dspy.InputField(desc="numbered questions, one per line")
    found: bool = dspy.OutputField(desc="True if one of the listed questions asks the same "
                                        "thing, otherwise False")


class _Memo:
    """A small thread-safe LRU of verdicts."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: OrderedDict[tuple[str, ...], bool] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, ...]) -> bool | None:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
            return None

    def put(self, key: tuple[str, ...], value: bool) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)


class _LMJudgeBase:
    """Shared LM resolution, naming and memo for the judges below."""

    kind = "lm-judge"

    def __init__(self, lm: Any = None, memo_size: int = 4096) -> None:
        self.lm = lm
        self._memo = _Memo(memo_size)
        self._memo_lm: Any = None

    def _active_lm(self) -> Any:
        lm = self.lm if self.lm is not None else dspy.settings.lm
        if lm is None:
            raise ConfigError(f"the {self.kind} has no LM",
                              hint="configure an LM (ambiqa.configure(ambiqa.make_lm())) "
                                   "before scoring grounding or interpretation metrics")
        return lm

    @property
    def name(self) -> str:
        lm = self.lm if self.lm is not None else dspy.settings.lm
        return f"{self.kind}:{lm_id(lm) if lm is not None else 'unconfigured'}"

    def _ask(self, predictor: Any, field: str, key: tuple[str, ...], **inputs: str) -> bool:
        from dspy.utils.exceptions import AdapterParseError

        lm = self._active_lm()
        if lm is not self._memo_lm:  # verdicts belong to one LM: a new LM starts afresh
            self._memo = _Memo(self._memo.size)
            self._memo_lm = lm
        full_key = (lm_id(lm), *key)
        cached = self._memo.get(full_key)
        if cached is not None:
            return cached
        try:
            # trace=None: a judge scoring inside a teleprompter must not become a demo
            with dspy.context(lm=lm, trace=None):
                pred = predictor(**inputs)
            verdict = _as_bool(getattr(pred, field, False))
        except (AdapterParseError, ValueError) as exc:
            # an LM that gave no reply fails the question (issue 33); only a reply that
            # does not parse is scored as no answer
            if (cause := lm_failure_in(exc.__cause__ or exc.__context__)) is not None:
                raise cause from exc
            record_event(self.kind, f"degraded: {type(exc).__name__}: {str(exc)[:200]}")
            return False  # not memoized: a later call may parse
        self._memo.put(full_key, verdict)
        return verdict


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in {"true", "yes", "1"}


class LMGroundingJudge(_LMJudgeBase):
    """V(q, p): the LM says whether ``passage`` answers ``question``.

    Callable as ``judge(question, answer, passage) -> bool`` (the :data:`metrics.Judge`
    shape). The answer is not shown: VerDICt's verification prompt judges the question against
    the passage, so a wrong short answer does not make a supporting passage fail.
    """

    kind = "lm-judge"

    def __init__(self, lm: Any = None, memo_size: int = 4096) -> None:
        super().__init__(lm, memo_size)
        self.verify = dspy.Predict(VerifyInterpretation)

    def __call__(self, question: str, answer: str, passage: str) -> bool:
        if not str(question).strip() or not str(passage).strip():
            return False
        block = passage if passage.lstrip().startswith("[1]") else numbered([passage])
        return self._ask(self.verify, "supported", ("v", question, block),
                         interpretation=question, passages=block)


class LMMatcher(_LMJudgeBase):
    """V(q, Q): the LM says whether ``candidates`` holds a question asking what ``question``
    asks. Callable as ``match(question, candidates) -> bool`` (:data:`metrics.Matcher`)."""

    kind = "lm-matcher"

    def __init__(self, lm: Any = None, memo_size: int = 4096) -> None:
        super().__init__(lm, memo_size)
        self.match = dspy.Predict(MatchInterpretation)

    def __call__(self, question: str, candidates: Sequence[str]) -> bool:
        cands = [c for c in candidates if str(c).strip()]
        if not str(question).strip() or not cands:
            return False
        listed = "\n".join(f"{i}. {c}" for i, c in enumerate(cands, 1))
        return self._ask(self.match, "found", ("m", question, listed),
                         question=question, candidates=listed)


def numbered(texts: Sequence[str]) -> str:
    """Passages as one numbered block, the layout VerifyInterpretation expects."""
    return "\n".join(f"[{i}] {t}" for i, t in enumerate(texts, 1) if str(t).strip())
