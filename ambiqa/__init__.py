"""ambiqa: declarative, optimizable DSPy programs for ambiguous and multi-hop question answering.

Importing ambiqa is cheap and offline: heavy libraries (DSPy, torch, colbert-ai) load on first
use. Environment defaults are set here, before anything imports LiteLLM or DSPy:
``LITELLM_LOCAL_MODEL_COST_MAP`` (otherwise LiteLLM fetches a price list over the network at
import) and ``DSPY_CACHEDIR`` (DSPy's response cache goes under ambiqa's cache directory).

The namespace holds ambiqa's own names only (``__all__``, its submodules and dunders): the
imports this module needs are bound under private names, and there is no ``from __future__
import annotations`` (it would bind ``annotations``).
"""

import os as _os
from types import ModuleType as _ModuleType
from typing import Any as _Any

from ambiqa.paths import cache_root as _cache_root  # light: os and pathlib only

_os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# Busy-waiting OpenMP threads make small torch ops ~100x slower on a shared 2-core machine
# (measured: a ColBERT searcher took 248 s to load instead of 9 s; a 32x384 @ 384x384 matmul
# 18 ms instead of 0.2 ms). Passive waiting costs nothing otherwise. Must precede torch's
# import; this is the one place ambiqa sets it.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
_os.environ.setdefault("HF_HUB_OFFLINE", "1")
_os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
_os.environ.setdefault("DSPY_CACHEDIR", str(_cache_root() / "dspy"))

from ambiqa.programs.registry import PROGRAMS as _PROGRAMS  # noqa: E402  (light: names only)
from ambiqa.version import __version__  # noqa: E402  (after the environment defaults)

#: public name -> "module:attribute", imported on first access (``import ambiqa`` stays light:
#: no DSPy, torch or network until a name is used). The program classes come from the
#: program registry (``ambiqa/programs/registry.py``), the one place they are listed.
_LAZY: dict[str, str] = {
    # the verbs (ambiqa.api)
    "index": "ambiqa.api.indexing:index",
    "open_index": "ambiqa.api.indexing:open_index",
    "evaluate": "ambiqa.api.jobs:evaluate",
    "compile": "ambiqa.api.jobs:compile",
    "tune": "ambiqa.api.jobs:tune",
    "tune_eor": "ambiqa.api.eor:tune_eor",
    "export": "ambiqa.api.jobs:export",
    "resolve": "ambiqa.api.targets:resolve",
    "IndexSettings": "ambiqa.api.indexing:IndexSettings",
    "IndexResult": "ambiqa.api.indexing:IndexResult",
    "EvaluateSettings": "ambiqa.api.jobs:EvaluateSettings",
    "EvaluateResult": "ambiqa.api.jobs:EvaluateResult",
    "CompileSettings": "ambiqa.api.jobs:CompileSettings",
    "CompileResult": "ambiqa.api.jobs:CompileResult",
    "ExportSettings": "ambiqa.api.jobs:ExportSettings",
    "ExportResult": "ambiqa.api.jobs:ExportResult",
    "TuneConfig": "ambiqa.optimizers.tune:TuneConfig",
    "TuneEorSettings": "ambiqa.api.eor:TuneEorSettings",
    "TuneEorResult": "ambiqa.api.eor:TuneEorResult",
    # the programs: each registered class by its own name (Diva, VerDICt, ...)
    **{target.rpartition(":")[2]: target for target in _PROGRAMS.values()},
    "AmbiqaProgram": "ambiqa.programs.base:AmbiqaProgram",
    "build": "ambiqa.programs.registry:build_program",
    "PROGRAMS": "ambiqa.programs.registry:PROGRAMS",
    # data and retrieval
    "Passage": "ambiqa.types:Passage",
    "load_dataset": "ambiqa.data.specs:load_dataset",
    "load_corpus": "ambiqa.data.corpus:load_corpus",
    "as_retriever": "ambiqa.retrieval.factory:as_retriever",
}

__all__ = ["__version__", "load", "make_lm", "configure", *_LAZY]


def __getattr__(name: str) -> _Any:
    """Import a public name on first use (PEP 562)."""
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'ambiqa' has no attribute {name!r}")
    import importlib

    module, _, attr = target.partition(":")
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    """``__all__``, the submodules imported so far and the module's dunders: no private
    helper, no name imported from elsewhere."""
    own = {name for name, value in globals().items()
           if (name.startswith("__") and name.endswith("__"))
           or (isinstance(value, _ModuleType) and value.__name__.startswith("ambiqa."))}
    return sorted(own | set(__all__))


def load(path: str | _os.PathLike[str], **kwargs: _Any) -> _Any:
    """Load a compiled artifact, or the JSON a program's own ``.save()`` wrote; return the
    callable program. Its index is opened by the name and kind the file records (a missing
    index or a different fingerprint is an error), unless ``retriever=`` gives one. See
    :func:`ambiqa.api.targets.load` for every option."""
    from ambiqa.api.targets import load as _load

    return _load(path, **kwargs)


def make_lm(spec: str | None = None, **kwargs: _Any) -> _Any:
    """A ``dspy.LM``: ``None``/"embedded" (the bundled model), "embedded:NAME", or
    "provider/model" for an endpoint (``api_base=``, ``api_key_env=``)."""
    from ambiqa.lm import make_lm as _make_lm

    return _make_lm(spec, **kwargs)


def configure(lm: _Any, **settings: _Any) -> _Any:
    """``dspy.configure(lm=lm)`` plus ambiqa's cost tracing, added beside the callbacks
    already installed (a user's MLflow or Langfuse logging keeps receiving events)."""
    from ambiqa.lm import configure as _configure

    return _configure(lm, **settings)
