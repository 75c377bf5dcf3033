"""The program list is written once (issue 44 item 3): ``ambiqa``'s top-level program names
come from ``ambiqa.programs.registry.PROGRAMS``, still without importing DSPy."""

from __future__ import annotations

import subprocess
import sys

import ambiqa
from ambiqa.programs.registry import PROGRAMS, program_class


def test_every_registered_program_is_a_top_level_name_of_its_own_class():
    for name, target in PROGRAMS.items():
        cls_name = target.rpartition(":")[2]
        assert cls_name in ambiqa.__all__, cls_name
        assert getattr(ambiqa, cls_name) is program_class(name)


def test_the_exports_are_read_from_the_registry_without_loading_a_program():
    code = ("import sys, ambiqa; print(sorted(m for m in sys.modules if m.startswith("
            "('dspy', 'ambiqa.programs.') ) and m != 'ambiqa.programs.registry'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
