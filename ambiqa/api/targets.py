"""A target -- program name, artifact, a program's own ``.save()`` JSON, or a module -- resolved
in one place.

Every verb that runs or exports something (``evaluate``, ``export``, ``ask``, ``ambiqa.load``,
``serve``) takes a *target*. What it is decides how it is built:

==========================  ================================================================
``"diva"``                  a registered program name: built zero-shot with ``config``
``"artifacts/diva.json"``   an ambiqa artifact (``format: ambiqa-artifact``): program, config,
                            demos and the index it was compiled over
``"my_diva.json"``          what ``prog.save("my_diva.json")`` wrote: DSPy's state plus an
                            ``ambiqa`` entry naming the program (``program=`` names it when a
                            plain DSPy save lacks the entry)
a ``dspy.Module``           used as it is
==========================  ================================================================

A file target goes through the one loader, :mod:`ambiqa.api.loader`: read and validated once,
its index opened by the name it records (or the retriever / index given), one fingerprint
policy (a rebuilt recorded index is an error unless ``strict_fingerprint=False``; a retriever
passed on purpose only warns), and a program that needs a retriever with none to open is
refused before anything loads.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ambiqa.api.loader import SAVED_KEY, Target, load_program_file
from ambiqa.errors import ConfigError
from ambiqa.lm import configure
from ambiqa.programs.registry import program_class
from ambiqa.retrieval.factory import open_retriever

__all__ = ["SAVED_KEY", "Target", "build_named", "check_target", "file_sha256",
           "is_file_target", "load", "resolve"]


def is_file_target(target: object) -> bool:
    """Whether ``target`` names a file (an artifact or a saved program), not a program name."""
    if not isinstance(target, str | Path):
        return False
    text = str(target)
    return text.endswith(".json") or Path(text).is_file()


def check_target(target: object) -> None:
    """Fail fast, before any model loads: an unknown program name names the nearest one."""
    if isinstance(target, str) and not is_file_target(target):
        program_class(target)


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file (a loaded program file's is :attr:`Target.sha256`, from the one
    read that parsed it)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc


def resolve(target: Any, *, retriever: Any = None, index: str | dict | None = None,
            index_root: str | Path | None = None, config: dict[str, Any] | None = None,
            program: str | None = None, with_index: bool = True,
            strict_fingerprint: bool | None = None, knn_encoder: Any = None,
            program_kwargs: dict[str, Any] | None = None) -> Target:
    """Build the program ``target`` names (see the module docstring).

    ``retriever`` (any retriever, callable or ``dspy.Retrieve``) or ``index`` (a name) supply
    the passages; a file target otherwise opens the index it records. ``with_index=False``
    builds without any index (exporting prompts needs the predictors only). ``config``
    applies to a program name only: a file's settings are the ones it was compiled with.
    ``strict_fingerprint``: None (default) refuses a recorded index whose fingerprint changed
    and warns for a retriever given on purpose; False warns for both, True refuses both.
    """
    import dspy

    if isinstance(target, dspy.Module):
        return Target(target, "module", getattr(target, "name", ""), config={})
    if not isinstance(target, str | Path):
        raise ConfigError(f"a target is a program name, a JSON file or a dspy.Module, got "
                          f"{type(target).__name__}")
    if is_file_target(target):
        return load_program_file(target, program=program, retriever=retriever, index=index,
                                 index_root=index_root, with_index=with_index,
                                 strict_fingerprint=strict_fingerprint,
                                 knn_encoder=knn_encoder, program_kwargs=program_kwargs,
                                 config=config)
    name = str(target).strip().lower().replace("-", "_")
    return build_named(program_class(name), name, retriever=retriever, index=index,
                       index_root=index_root, config=config, with_index=with_index,
                       program_kwargs=program_kwargs)


def build_named(cls: type, name: str, *, retriever: Any = None,
                index: str | dict | None = None, index_root: str | Path | None = None,
                config: dict[str, Any] | None = None, with_index: bool = True,
                program_kwargs: dict[str, Any] | None = None) -> Target:
    """Build the registered program ``cls`` (named ``name``), its index opened by name when
    no retriever is given. Takes the class, not the name, so a caller that already looked it
    up (an evaluation plan) does not look it up again."""
    if retriever is None and index is not None and with_index:
        retriever = open_retriever(index, root=Path(index_root) if index_root else None)
    if retriever is None and with_index and getattr(cls, "needs_retriever", True):
        raise ConfigError(f"program {name!r} needs a retriever",
                          hint="pass retriever=... or index=NAME (build one with "
                               "ambiqa.index(...) or `ambiqa index CORPUS --name NAME`)")
    try:
        prog = cls(retriever=retriever, **(config or {}), **(program_kwargs or {}))
    except TypeError as exc:  # as programs.registry.build_program words it
        raise ConfigError(f"bad settings for program {name!r}: {exc}") from exc
    return Target(prog, "program", name, config=dict(config or {}))


def load(path: str | Path, *, retriever: Any = None, lm: Any = None, program: str | None = None,
         index: str | None = None, strict_fingerprint: bool | None = None,
         knn_encoder: Any = None, program_kwargs: dict[str, Any] | None = None) -> Any:
    """Load an artifact or a program's own ``.save()`` JSON; return the callable program.

    ``retriever``/``index`` replace the index the file records (otherwise it is opened by
    name; a missing index or a different fingerprint is an :class:`ArtifactError`, and a
    retriever given whose fingerprint differs a warning). ``strict_fingerprint=False`` makes
    the recorded index's mismatch a warning too, ``True`` makes the given one's an error.
    ``lm``: configured as DSPy's LM with ambiqa tracing, beside the user's callbacks.
    """
    if not is_file_target(path):
        raise ConfigError(f"ambiqa.load takes a JSON file, got {path!r}",
                          hint="build a program by name with ambiqa.Diva(...) or "
                               "ambiqa.build('diva', retriever=...)")
    found = load_program_file(path, program=program, retriever=retriever, index=index,
                              strict_fingerprint=strict_fingerprint, knn_encoder=knn_encoder,
                              program_kwargs=program_kwargs)
    if lm is not None:
        configure(lm)
    return found.program
