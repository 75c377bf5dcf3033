"""Bootstrapping with several training questions in flight (``ambiqa compile --threads``).

DSPy's ``BootstrapFewShot`` runs the teacher on one training question at a time and stops once
it has enough passing traces. A Diva question is about seven LM calls one after another (~95 s
on the 2-core CPU), so an LM that serves several calls at once (the embedded model's two
slots, any endpoint) sits half idle while a compile walks the training set.

:class:`AheadBootstrapFewShot` keeps DSPy's loop as it is -- the order of the questions, the
metric and threshold, the error count, how a trace becomes demos, where it stops -- and
changes only where the teacher's answer comes from. When the loop asks the teacher about a
question not answered yet, that question and the next ``threads - 1`` are answered at once,
each by its own copy of the teacher that shows the gold demos minus the question's own (what
DSPy means to do to its one teacher); the loop then takes each answer and its trace in
training order.

"Minus the question's own" is also a fix, with any ``threads``: DSPy leaves out a demo *equal*
to the training example, and ambiqa's gold demos never are (they are built from an example,
with other fields), so a teacher asked about one of its own demo questions was shown the gold
answer. The bootstrap and knn compiles of BENCHMARKS.md's evidence section never met that
case (checked: no question of the teacher's demos came up before their loops stopped).

The price: when the loop stops (enough traces, or the ``--max-lm-calls`` budget), the questions
already answered past that point were spent for nothing -- at most ``threads - 1`` questions'
LM calls, counted in the compile's cost and budget like any other call. Rounds after the first
(``max_rounds > 1``) run under another LM (DSPy's temperature-1.0 rollouts) and answer one
question at a time, as DSPy does.
"""

from __future__ import annotations

from typing import Any

import dspy

from ambiqa.parallel import run_parallel


def _key(inputs: dict[str, Any]) -> tuple | None:
    """A hashable key of a call's inputs (None when a value is not hashable)."""
    try:
        key = tuple(sorted(inputs.items()))
        hash(key)
    except TypeError:
        return None
    return key


def _is_of(demo: Any, example: Any) -> bool:
    """Whether ``demo`` shows ``example``. DSPy's loop leaves out a demo equal to the training
    example, which never matches ambiqa's gold demos: they are built from an example with
    other fields (passages, pairs, a long answer), so they are matched by their question too.
    Without this the teacher saw the gold answer of the very question it was answering."""
    question = example.get("question")
    return demo == example or (question is not None and demo.get("question") == question)


class _Answered:
    """One question's teacher run: its prediction and trace, or the exception it raised."""

    __slots__ = ("error", "prediction", "steps")

    def __init__(self, prediction: Any = None, steps: list | None = None,
                 error: Exception | None = None) -> None:
        self.prediction, self.steps, self.error = prediction, steps or [], error


class _TeacherAhead:
    """Stands in for the teacher inside DSPy's bootstrap loop, answering ahead in windows."""

    def __init__(self, teacher: dspy.Module, trainset: list[Any], threads: int) -> None:
        self.teacher = teacher
        self.threads = threads
        self.lm = dspy.settings.lm  # round 0's LM; another one means a later round
        # the gold demos before DSPy's loop takes the current question out of them
        self.demos = {name: list(p.demos) for name, p in teacher.named_predictors()}
        self.order: list[Any] = list(trainset)
        self.index: dict[tuple, int] = {}
        for i, example in enumerate(self.order):
            key = _key(dict(example.inputs()))
            if key is not None:
                self.index.setdefault(key, i)
        self.answered: dict[int, _Answered] = {}
        self.started: set[int] = set()

    # DSPy's loop takes the question out of the teacher's demos through this
    def named_predictors(self) -> list[tuple[str, Any]]:
        return self.teacher.named_predictors()

    def __call__(self, **inputs: Any) -> Any:
        key = _key(inputs)
        i = self.index.get(key) if key is not None else None
        if i is None:  # not a training question: DSPy's loop asks about nothing else
            return self.teacher(**inputs)
        if dspy.settings.lm is not self.lm:  # a later round's rollout LM: this one alone
            done = self._answer(self.order[i])
        else:
            if i not in self.answered:
                ahead = range(i + 1, min(i + self.threads, len(self.order)))
                window = [i, *(j for j in ahead if j not in self.started)]
                self.started.update(window)
                results = run_parallel(self._answer, [self.order[j] for j in window],
                                       max_workers=self.threads)
                self.answered.update(zip(window, results, strict=True))
            done = self.answered.pop(i)
        if done.error is not None:
            raise done.error
        dspy.settings.trace.extend(done.steps)
        return done.prediction

    def _answer(self, example: Any) -> _Answered:
        """Run a fresh copy of the teacher on ``example`` (never raises: the loop does)."""
        copy = self.teacher.deepcopy()
        own = dict(self.teacher.named_predictors())
        by_copy: dict[int, Any] = {}
        for name, predictor in copy.named_predictors():
            predictor.demos = [d for d in self.demos[name] if not _is_of(d, example)]
            by_copy[id(predictor)] = own[name]
        try:
            with dspy.context(trace=[]):
                prediction = copy(**example.inputs())
                trace = list(dspy.settings.trace)
        except Exception as exc:  # handed to DSPy's loop, which counts it as it would
            return _Answered(error=exc)
        # the loop names a trace step by the teacher's own predictor objects
        steps = [(by_copy.get(id(p), p), inp, out) for p, inp, out in trace]
        return _Answered(prediction, steps)


class AheadBootstrapFewShot(dspy.BootstrapFewShot):
    """``dspy.BootstrapFewShot`` that answers ``threads`` training questions at once and keeps
    each question's own gold demo out of the teacher's prompt (with ``threads`` 1 too)."""

    def __init__(self, *args: Any, threads: int = 2, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.threads = threads

    def _bootstrap(self, *, max_bootstraps: int | None = None) -> None:
        teacher = self.teacher
        # a slice, not list(): a budgeted training list stops iterating when the budget is spent
        self.teacher = _TeacherAhead(teacher, self.trainset[:], self.threads)
        try:
            return super()._bootstrap(max_bootstraps=max_bootstraps)
        finally:
            self.teacher = teacher
