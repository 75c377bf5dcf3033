"""Query refinement, closed-book: Diva's §4.3 / App. A.3 baseline (after Amplayo et al. 2022).

No retrieval. The LM first refines the ambiguous question into its possible interpretations,
then writes one long answer that covers all of them from its own knowledge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ambiqa.programs.base import AmbiqaProgram
from ambiqa.programs.config import ProgramConfig, int_field, resolve_config
from ambiqa.programs.diva import InferInterpretations
from ambiqa.programs.steps import LongAnswerStep
from ambiqa.types import Interpretation


@dataclass(frozen=True)
class QueryRefinementConfig(ProgramConfig):
    """Query refinement's settings, the single source of their defaults.

    Attributes:
        max_interpretations: cost guard on the rewrites kept (as Diva's).
    """

    label = "query_refinement: "
    max_interpretations: int = int_field(8)


class QueryRefinementClosedBook(AmbiqaProgram):
    """Closed-book answering guided by LM-refined interpretations.

    1. Refine: the question becomes a list of specific interpretations. The paper prompts the
       LLM to do this in one step; here Diva's own two-step refinement is reused (ambiguity
       type + reason, then rewrites; :class:`~ambiqa.programs.diva.InferInterpretations`), so
       the baseline and Diva differ only in what Diva adds (retrieval, verification, adaptive
       generation). The rewrite runs for every question, as in Diva; a rewrite that yields
       nothing usable leaves the question as its only interpretation.
    2. Answer: one long answer written to cover every interpretation, with no passages
       (:class:`~ambiqa.programs.steps.LongAnswerStep` given the unanswered interpretations and
       an empty passage list). The paper puts the interpretations into the answering prompt
       as in-context material; here they travel as the step's interpretations field, one
       ``- question`` line each (no answer yet).

    ``interpretations`` in the prediction is empty, as for every closed-book answer: no
    reading gets an answer of its own (the answers live in the paragraph). The refined
    readings are returned as ``pseudo_interpretations``, with ``ambiguity_type`` and
    ``reason``. Cost: two LM calls plus the answer. Faithfulness table:
    ``docs/methods.md#baselines``.
    """

    name = "query_refinement"
    # minimal dependent LM rounds: type -> rewrite (always run, as in Diva's default) -> long
    # answer
    min_lm_rounds = 3
    needs_retriever = False

    config_class = QueryRefinementConfig

    def __init__(self, retriever=None,
                 config: QueryRefinementConfig | dict[str, Any] | None = None,
                 **settings: Any) -> None:
        super().__init__(retriever)
        self.use_config(resolve_config(QueryRefinementConfig, config, settings,
                                       owner="QueryRefinement"))
        self.refine = InferInterpretations(self.max_interpretations)
        self.long_answer = LongAnswerStep()

    def run(self, question: str) -> dict[str, Any]:
        refined = self.refine(question=question)
        readings = [Interpretation(question=q, answer="") for q in refined["interpretations"]]
        answer = self.long_answer(question=question, pairs=readings, passages=[])
        return {
            "interpretations": [], "answer": answer, "passages": [],
            "ambiguity_type": refined["ambiguity_type"], "reason": refined["reason"],
            "pseudo_interpretations": refined["interpretations"],
        }
