"""Program settings as frozen dataclasses that validate themselves.

Each program declares one ``ProgramConfig`` subclass (its ``config_class``): its fields are the
program's hyperparameters with their defaults and their one description, in the order
``config()`` reports them (artifacts and ``run.json`` store that dict). A program takes its
config and keyword overrides, ``Diva(retriever, DivaConfig(top_k=3), temperature=0)`` or just
``Diva(retriever, top_k=3)``; :func:`resolve_config` merges them, so the config is the single
source of defaults (a constructor restates none). Integer fields carry their lower bound in
the field metadata (:func:`int_field`), so one loop checks them all with
:func:`ambiqa.checks.check_int`; a subclass adds cross-field and choice checks in
:meth:`ProgramConfig.check`. ``bool_field`` values are stored as ``bool``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from ambiqa.checks import check_int
from ambiqa.errors import ConfigError

#: the answer forms of the baselines: an ASQA paragraph, or a few words (EM/F1 data sets)
ANSWER_FORMS = ("long", "short")


def int_field(default: int | None, minimum: int = 1, *, none_ok: bool = False,
              hint: str | None = None) -> Any:
    """A dataclass field holding an integer >= ``minimum`` (or None where ``none_ok``)."""
    return field(default=default, metadata={"minimum": minimum, "none_ok": none_ok,
                                            "hint": hint})


def trim_field() -> Any:
    """The ``trim_sentences`` field (:mod:`ambiqa.programs.trim`): ``None`` (off, the default)
    or the sentences kept per passage, at least 1."""
    return int_field(None, 1, none_ok=True,
                     hint="None shows whole passages; N >= 1 keeps N sentences per passage")


def answer_form_field(default: str = "long") -> Any:
    """A dataclass field holding one of :data:`ANSWER_FORMS` (checked on construction)."""
    return field(default=default, metadata={"choices": ANSWER_FORMS})


def bool_field(default: bool) -> Any:
    """A dataclass field whose value is stored as ``bool(value)``."""
    return field(default=default, metadata={"bool": True})


@dataclass(frozen=True)
class ProgramConfig:
    """Base of every program's settings; subclasses only declare fields and extra checks."""

    #: prefix for error messages ("toc: k must be ..."), empty for none
    label: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("bool"):
                object.__setattr__(self, f.name, bool(value))
            elif "choices" in f.metadata and value not in f.metadata["choices"]:
                raise ConfigError(
                    f"{self.label}{f.name} must be one of {', '.join(f.metadata['choices'])}, "
                    f"got {value!r}")
            elif "minimum" in f.metadata:
                check_int(f"{self.label}{f.name}", value, f.metadata["minimum"],
                          none_ok=f.metadata["none_ok"], hint=f.metadata["hint"])
        self.check()

    def check(self) -> None:
        """Cross-field and choice checks (override); raise :class:`ConfigError`."""

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.names()}


def resolve_config(config_class: type[ProgramConfig], config: Any = None,
                   overrides: dict[str, Any] | None = None, *,
                   owner: str = "") -> ProgramConfig:
    """The settings a program runs with: ``config`` (an instance of ``config_class``, a mapping
    of its fields, or ``None`` for the defaults) with the keyword ``overrides`` applied.

    An override that is not a field is a :class:`TypeError` naming the program and its fields,
    as an unknown keyword argument to a constructor always was.
    """
    if config is None:
        values: dict[str, Any] = {}
    elif isinstance(config, config_class):
        values = config.to_dict()
    elif isinstance(config, dict):
        values = dict(config)
    else:
        raise TypeError(f"{owner or config_class.__name__}: config must be a "
                        f"{config_class.__name__} or a dict of its fields, got "
                        f"{type(config).__name__} (pass settings by keyword)")
    values.update(overrides or {})
    unknown = sorted(set(values) - set(config_class.names()))
    if unknown:
        raise TypeError(f"{owner or config_class.__name__}() got unexpected keyword "
                        f"argument(s) {', '.join(map(repr, unknown))}; its settings are "
                        f"{', '.join(config_class.names())}")
    return config_class(**values)
