"""Every signature states its output cap on its class, and the cap reaches the LM call."""

from __future__ import annotations

import importlib
import pkgutil

import dspy
import pytest

import ambiqa.signatures as pkg
from ambiqa.signatures.common import CAP_ATTRIBUTE, output_cap
from ambiqa.tracing import TraceCallback, current_module, current_output_cap


def all_signatures() -> dict[str, type]:
    """Every dspy.Signature class ambiqa defines: the signatures package and the judge's."""
    modules = [importlib.import_module(f"ambiqa.signatures.{info.name}")
               for info in pkgutil.iter_modules(pkg.__path__)]
    modules.append(importlib.import_module("ambiqa.evaluation.judge"))
    found = {}
    for module in modules:
        for name, obj in vars(module).items():
            if (isinstance(obj, type) and issubclass(obj, dspy.Signature)
                    and obj is not dspy.Signature and obj.__module__ == module.__name__):
                found[name] = obj
    return found


def test_signatures_are_found() -> None:
    found = all_signatures()
    assert {"VerifyInterpretation", "WriteLongAnswer", "MatchInterpretation"} <= set(found)
    assert len(found) >= 26


@pytest.mark.parametrize("name", sorted(all_signatures()))
def test_every_signature_has_an_output_cap(name: str) -> None:
    """A signature without a cap would silently fall back to the LM's 512 tokens."""
    signature = all_signatures()[name]
    cap = vars(signature).get(CAP_ATTRIBUTE)  # its own, not inherited by accident
    assert isinstance(cap, int) and 0 < cap < 512, f"{name}.{CAP_ATTRIBUTE} = {cap!r}"
    assert output_cap(signature) == cap
    assert CAP_ATTRIBUTE not in signature.fields  # a ClassVar: never part of the prompt


def test_the_trace_callback_carries_the_calling_signatures_cap() -> None:
    from ambiqa.signatures.answering import WriteLongAnswer
    from ambiqa.signatures.verification import VerifyInterpretation

    cb = TraceCallback()
    assert current_output_cap() is None
    cb.on_module_start("outer", dspy.Predict(WriteLongAnswer), {})
    assert (current_module(), current_output_cap()) == ("WriteLongAnswer", 256)
    cb.on_module_start("inner", dspy.Predict(VerifyInterpretation), {})
    assert (current_module(), current_output_cap()) == ("VerifyInterpretation", 48)
    cb.on_module_end("inner", None)
    assert (current_module(), current_output_cap()) == ("WriteLongAnswer", 256)
    cb.on_module_end("outer", None)
    assert current_output_cap() is None


def test_a_renamed_signature_keeps_its_cap() -> None:
    """The cap belongs to the class, not to its name (the old name-keyed table lost it)."""
    from ambiqa.signatures.verification import VerifyInterpretation

    renamed = type("CheckReading", (VerifyInterpretation,), {"__doc__": "x"})
    assert output_cap(renamed) == VerifyInterpretation.output_cap_tokens


def test_an_artifacts_state_keeps_each_signatures_cap() -> None:
    """DSPy rebuilds a loaded signature as an anonymous StringSignature; loading an artifact
    puts the class's name and cap back, so a compiled program is capped like a fresh one."""
    from ambiqa.optimizers.artifact import load_program_state
    from ambiqa.signatures.verification import VerifyInterpretation

    class One(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.check = dspy.Predict(VerifyInterpretation)

    state = One().dump_state()
    fresh = One()
    plain = One()
    plain.load_state(state)
    assert output_cap(plain.check.signature) is None  # what DSPy alone leaves
    load_program_state(fresh, state)
    assert fresh.check.signature.__name__ == "VerifyInterpretation"
    assert output_cap(fresh.check.signature) == VerifyInterpretation.output_cap_tokens
