"""A new optimizer is one registered class (issue 44 item 3): the toy teleprompter below lives in
this file only, and ``compile``, the ``--dry-run`` estimate, the CLI's ``--optimizer`` and the
``--help`` listing all find it."""

from __future__ import annotations

from typing import Any

import pytest

from ambiqa.cli import build_parser
from ambiqa.cli.catalog import optimizers_listing
from ambiqa.data import demo_corpus_path, load_corpus, load_dataset
from ambiqa.optimizers import registry
from ambiqa.optimizers.compile import compile_program
from ambiqa.optimizers.estimate import estimate
from ambiqa.optimizers.recipes import check_teleprompter
from ambiqa.optimizers.registry import (
    CompileJob,
    Teleprompter,
    get_teleprompter,
    register_teleprompter,
    teleprompter_names,
)
from ambiqa.programs.vanilla_rag import VanillaRAG
from ambiqa.retrieval.base import InMemoryRetriever


class Unchanged(Teleprompter):
    """Returns the student as it is, and says it runs every training question twice."""

    name = "toy-unchanged"
    summary = "the student unchanged (a registry test)"

    def compile(self, student: Any, job: CompileJob) -> Any:
        job.report.settings["toy"] = len(job.trainset)
        return student.deepcopy()

    @classmethod
    def program_calls(cls, n_train: int, n_val: int, num_candidates: int, trials: int,
                      ) -> tuple[float, float]:
        return 2.0 * n_train, 0.0


@pytest.fixture()
def toy(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTERED", dict(registry._REGISTERED))
    return register_teleprompter(Unchanged)


def test_compile_and_the_registry_find_a_registered_teleprompter(toy):
    assert "toy-unchanged" in teleprompter_names()
    assert get_teleprompter("toy-unchanged") is Unchanged
    assert check_teleprompter("toy-unchanged") == "toy-unchanged"
    program = VanillaRAG(InMemoryRetriever(load_corpus(demo_corpus_path())), k=2)
    _, report = compile_program(program, load_dataset("demo:train"), optimizer="toy-unchanged")
    assert report.optimizer == "toy-unchanged" and report.settings["toy"] > 0


def test_the_dry_run_estimate_reads_its_program_calls(toy):
    per_q = {"lm_calls": 2.0, "input_tokens": 100.0, "output_tokens": 10.0}
    est = estimate(per_q, optimizer="toy-unchanged", n_train=5)
    assert est["lm_calls"] == pytest.approx(2 * 5 * 2.0)


def test_the_help_listing_names_it(toy):
    assert "toy-unchanged" in optimizers_listing()
    assert "the student unchanged (a registry test)" in optimizers_listing()


def test_the_cli_accepts_it_as_optimizer(toy):
    """The parser reads the registry when it is built, not a list frozen at import."""
    args = build_parser().parse_args(["compile", "vanilla_rag", "--optimizer", "toy-unchanged"])
    assert args.optimizer == "toy-unchanged"
