"""ambiqa's version, in a module of its own so any layer can record it.

Artifacts, manifests and index manifests write it; they sit below the top-level package
(:mod:`ambiqa`'s ``__init__`` is the public API, the top of the import layers), so they read
it here rather than from ``ambiqa``. Keep it equal to ``pyproject.toml``'s ``version``.
"""

from __future__ import annotations

__version__ = "0.1.0"
