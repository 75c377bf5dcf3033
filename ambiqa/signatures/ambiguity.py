"""Ambiguity typing signatures (Diva §3.2, eq. 3; the type inventory of its Table 4).

Diva infers pseudo-interpretations in two LM steps, the way a person would: first name which
part of the question is ambiguous and why (this file), then rewrite the question once per
reading (:class:`ambiqa.signatures.disambiguation.PseudoInterpretations`).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import dspy

#: The labels an ambiguity can take. ``None`` stands for Diva's "N/A" (nothing ambiguous).
AmbiguityType = Literal["AmbSub", "AmbObj", "AmbPred", "AmbTime", "AmbLoc", "None"]
AMBIGUITY_TYPES: tuple[str, ...] = ("AmbSub", "AmbObj", "AmbPred", "AmbTime", "AmbLoc", "None")


class TypeAmbiguity(dspy.Signature):
    """This question is ambiguous: it can be read in more than one way. Work out what makes it
    ambiguous.

    Pick the one label that fits best:
    - AmbSub: it is unclear who or what the question is about (for example, a record that
      exists separately for men and for women).
    - AmbObj: it is unclear which thing the question asks about (several people, works or
      events share the name it uses).
    - AmbPred: the verb or the property asked for can be understood in several ways (first
      released versus first broadcast, played a role versus performed a song).
    - AmbTime: the answer changes over time and the question fixes no year, season or edition.
    - AmbLoc: the answer changes from place to place and the question fixes no country or
      region.
    - None: only if, after looking for each kind above, you find no second reading at all.
    First explain in one or two sentences which words are ambiguous and what they could refer
    to, then give the label alone, without brackets."""

    output_cap_tokens: ClassVar[int] = 128

    question: str = dspy.InputField(desc="an ambiguous question, as a user asked it")
    reason: str = dspy.OutputField(
        desc="which part of the question is ambiguous and the readings it allows")
    ambiguity_type: AmbiguityType = dspy.OutputField(
        desc="exactly one of: AmbSub, AmbObj, AmbPred, AmbTime, AmbLoc, None")
