"""User-facing errors.

Every error a user can cause (bad input, missing file, wrong artifact) is an ``AmbiqaError``
carrying a one-line message and, where one exists, the fix. The CLI prints these without a
traceback and exits non-zero; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class AmbiqaError(Exception):
    """An error caused by input or environment that the user can fix."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  fix: {self.hint}" if self.hint else self.message


class DataError(AmbiqaError):
    """A data file or record is missing, unreadable or malformed."""


class ModelError(AmbiqaError):
    """An embedded model cannot be assembled or loaded."""


class RetrievalIndexError(AmbiqaError):
    """A retrieval index is missing, corrupt or built from another corpus."""


class ArtifactError(AmbiqaError):
    """A compiled-program artifact cannot be read, validated or written."""


class ConfigError(AmbiqaError):
    """A name, option or spec given by the user is invalid."""


class RunError(AmbiqaError):
    """An evaluation run stopped at run time, e.g. because too many examples failed."""


class LMUnavailableError(AmbiqaError):
    """The LM could not answer at all (refused connection, timeout, HTTP error, a body that is
    not a completion) after every retry: the question fails, it is not answered around.

    A reply that arrives but does not parse is different: the program degrades that step.
    ``kind`` is the failure class ("connection", "timeout", "server_error", "malformed", ...).
    """

    def __init__(self, message: str, *, hint: str | None = None, kind: str = "lm") -> None:
        super().__init__(message, hint=hint)
        self.kind = kind
