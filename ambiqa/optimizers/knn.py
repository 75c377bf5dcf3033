"""Nearest-neighbour demos: each call gets the ``k`` demos whose question is closest to its own.

Diva and ToC choose their few-shot examples per question by similarity; DSPy's
``KNNFewShot`` does the same by re-running BootstrapFewShot on the nearest training examples
inside every forward call (LM calls at answer time, and nothing a JSON artifact can hold).
Here a compiled predictor keeps its whole demo *pool* as ordinary DSPy demos (so the state
is plain JSON and exports list the pool), and :func:`install_knn` makes the predictor pick
``k`` of them per call by cosine similarity between the call's key text and each demo's, with
the local MiniLM encoder (:mod:`ambiqa.retrieval.encoder`, never a hub download). No LM call
is spent on selection. The key text is the ``question`` input when the signature has one,
else the first input field. An artifact compiled with ``knn`` records ``k`` in its manifest
and :func:`ambiqa.load` re-installs the selector.
"""

from __future__ import annotations

from typing import Any

import dspy
import numpy as np

from ambiqa.retrieval.encoder import SharedEncoder


def _key_field(signature: Any) -> str:
    names = list(signature.input_fields)
    return "question" if "question" in names else (names[0] if names else "")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value or "")


class KNNPredict(dspy.Predict):
    """A ``dspy.Predict`` that shows ``knn_k`` of its demos, the nearest to each call.

    Installed by switching an existing predictor's class (see :func:`install_knn`), so
    named_predictors, state dumps and deep copies keep working unchanged.
    """

    knn_k: int = 2
    knn_encoder = SharedEncoder()  # None: the shared MiniLM, loaded on first use

    def _knn_select(self, inputs: dict[str, Any]) -> list[Any]:
        field = _key_field(self.signature)
        demos = list(self.demos)
        keys = [_text(d.get(field, "") if hasattr(d, "get") else "") for d in demos]
        encoder = self.knn_encoder
        cached = getattr(self, "_knn_cache", None)
        if cached is None or cached[0] != keys:
            vecs = np.asarray(encoder.encode(keys), dtype=np.float32)
            cached = (keys, vecs)
            self._knn_cache = cached
        query = np.asarray(encoder.encode([_text(inputs.get(field, ""))]), dtype=np.float32)[0]
        sims = cached[1] @ query
        order = np.argsort(-sims, kind="stable")[: self.knn_k]
        return [demos[i] for i in order]

    def forward(self, **kwargs: Any) -> Any:
        if "demos" not in kwargs and len(self.demos) > self.knn_k:
            kwargs["demos"] = self._knn_select(kwargs)
        return super().forward(**kwargs)


def install_knn(program: dspy.Module, k: int, encoder: Any = None) -> dspy.Module:
    """Make every predictor of ``program`` choose ``k`` nearest demos per call (in place)."""
    for _, predictor in program.named_predictors():
        if type(predictor) is dspy.Predict or isinstance(predictor, KNNPredict):
            predictor.__class__ = KNNPredict
            predictor.knn_k = int(k)
            predictor.knn_encoder = encoder
            if hasattr(predictor, "_knn_cache"):
                del predictor._knn_cache
    return program
