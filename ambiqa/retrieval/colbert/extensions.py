"""Compile colbert-ai's C++ extensions ahead of the first search.

colbert-ai builds four small torch C++ extensions (residual decompression, pid filtering,
segmented lookup and max-sim) the first time an index is built or searched, ~145 s on two
cores (measured 2026-11-23), cached under ``$TORCH_EXTENSIONS_DIR`` (ambiqa's cache by
default). ``ambiqa doctor --prepare`` runs this right after the install, so a user's first
``ambiqa demo`` or ``ambiqa index`` does not pay it (``scripts/demo.sh`` does so).
"""

from __future__ import annotations

from ambiqa.retrieval.colbert.patches import import_colbert


def build_extensions() -> list[str]:
    """Build (or load, when already built) every C++ extension colbert-ai uses on a CPU;
    returns their owners' names."""
    import_colbert()  # sets TORCH_EXTENSIONS_DIR before anything compiles
    from colbert.indexing.codecs.residual import ResidualCodec
    from colbert.modeling.colbert import ColBERT
    from colbert.search.index_storage import IndexScorer
    from colbert.search.strided_tensor import StridedTensor

    owners = (ResidualCodec, ColBERT, IndexScorer, StridedTensor)
    for owner in owners:
        owner.try_load_torch_extensions(use_gpu=False)
    return [owner.__name__ for owner in owners]
