"""``ambiqa doctor`` after the README's set-up: an optional part that is absent (the fast 0.5B
model) is a note, not a failure."""

from __future__ import annotations

from ambiqa import doctor


def _missing() -> str:
    raise doctor.CheckFailed("part 1 of the 0.5B model is not installed")


def test_an_optional_check_that_fails_is_a_note():
    results: list[doctor.Result] = []
    doctor._check("embedded LM 0.5B (fast, optional)", _missing, "pip install x", results,
                  optional=True)
    doctor._check("dspy", _missing, "pip install dspy", results)
    assert [(r.ok, r.note) for r in results] == [(True, True), (False, False)]


def test_run_checks_passes_with_only_notes(monkeypatch):
    lines: list[str] = []
    monkeypatch.setattr(doctor, "_check", lambda name, fn, fix, out, optional=False: out.append(
        doctor.Result(optional, name, "absent", fix, note=optional)) if optional else
        out.append(doctor.Result(True, name, "ok")))
    assert doctor.run_checks(print_fn=lines.append, index_root="/nonexistent-root") is True
    assert any(line.startswith("[note] embedded LM 0.5B") for line in lines)
