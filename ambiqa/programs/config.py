"""Program settings as frozen dataclasses that validate themselves.

Each program declares one ``ProgramConfig`` subclass: its fields are the constructor's
hyperparameters, in the order ``config()`` reports them (artifacts and ``run.json`` store that
dict). Integer fields carry their lower bound in the field metadata (:func:`int_field`), so one
loop checks them all with :func:`ambiqa.checks.check_int`; a subclass adds cross-field and
choice checks in :meth:`ProgramConfig.check`. ``bool_field`` values are stored as ``bool``.
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
