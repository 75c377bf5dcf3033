"""Types shared by several signature files."""

from __future__ import annotations

from pydantic import BaseModel, Field


class QAPair(BaseModel):
    """A disambiguated question (DQ) with its answer (DA) and the passage that supports it."""

    question: str = Field(description="a specific, unambiguous rewrite of the question")
    answer: str = Field(description="a short answer (a few words) to that specific question")
    passage: int = Field(default=0, description="number of the passage that gives the answer, "
                                                "0 if none")
