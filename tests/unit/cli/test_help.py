"""``--help`` teaches: every flag says what it does, and the commands that take a program list
the programs and optimizers, one line each (issue 43)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from ambiqa.cli import build_parser, main
from ambiqa.optimizers.recipes import TELEPROMPTERS
from ambiqa.optimizers.registry import teleprompter_summaries
from ambiqa.programs.registry import PROGRAMS, SUMMARIES

OPTIMIZER_SUMMARIES = teleprompter_summaries()


def missing_help(parser: argparse.ArgumentParser, path: str | None = None) -> list[str]:
    """Every sub-command, option and positional under ``parser`` that has no help text."""
    path = path or parser.prog
    missing: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if not helps.get(name):
                    missing.append(f"{path} {name} (the command)")
                missing += missing_help(sub, f"{path} {name}")
        elif not action.help or action.help == argparse.SUPPRESS:
            missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_flag_and_positional_of_every_command_has_help():
    assert missing_help(build_parser()) == []


def test_the_walk_finds_a_flag_a_positional_and_a_command_without_help():
    parser = argparse.ArgumentParser(prog="x")
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("run", help="run it")
    p.add_argument("target")
    p.add_argument("--fast", action="store_true", help="go fast")
    p.add_argument("--out")
    deep = sub.add_parser("tools").add_subparsers(dest="tool").add_parser("fix", help="fix")
    deep.add_argument("--dry-run", action="store_true", help=argparse.SUPPRESS)
    assert missing_help(parser) == ["x run target", "x run --out", "x tools (the command)",
                                    "x tools fix --dry-run"]


def test_every_program_and_optimizer_has_its_one_line():
    assert list(SUMMARIES) == list(PROGRAMS)
    assert list(OPTIMIZER_SUMMARIES) == list(TELEPROMPTERS)
    assert all(text and "\n" not in text for text in [*SUMMARIES.values(),
                                                       *OPTIMIZER_SUMMARIES.values()])


def _help(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def _listed(out: str, name: str, summary: str) -> bool:
    """``name`` at the start of a row, followed by its whole summary (a long one may wrap)."""
    starts_a_row = any(line.split()[:1] == [name] for line in out.splitlines())
    return starts_a_row and " ".join([name, *summary.split()]) in " ".join(out.split())


@pytest.mark.parametrize("argv", [[], ["evaluate"], ["compile"], ["ask"]])
def test_help_lists_programs_and_optimizers_one_line_each(argv, capsys):
    out = _help(argv, capsys)
    for name, summary in SUMMARIES.items():
        assert _listed(out, name, summary), (argv, name)
    for name, summary in OPTIMIZER_SUMMARIES.items():
        assert _listed(out, name, summary), (argv, name)


@pytest.mark.parametrize("argv", [["tune"], ["export"]])
def test_other_program_taking_commands_list_the_programs(argv, capsys):
    out = _help(argv, capsys)
    assert all(_listed(out, name, summary) for name, summary in SUMMARIES.items())


def test_index_help_keeps_its_own_epilog(capsys):
    out = _help(["index"], capsys)
    assert "corpus formats" in out and "closed_book" not in out


def test_help_stays_fast_it_imports_no_dspy():
    code = ("import sys\nfrom ambiqa.cli import main\n"
            "for argv in (['--help'], ['compile', '--help'], ['ask', '--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print('HEAVY', sorted(m for m in ('dspy', 'litellm', 'torch') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert "HEAVY []" in res.stdout
