"""Settings once: each program takes its config dataclass (plus keyword overrides), and the
config is the only place a default is written."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from ambiqa.errors import ConfigError
from ambiqa.programs.config import ProgramConfig, resolve_config
from ambiqa.programs.registry import PROGRAMS, build_program, program_class


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_program_has_a_config_class_and_restates_no_default(name: str) -> None:
    cls = program_class(name)
    config_class = cls.config_class
    assert issubclass(config_class, ProgramConfig) and dataclasses.is_dataclass(config_class)
    params = inspect.signature(cls.__init__).parameters
    restated = sorted(set(params) & set(config_class.names()))
    assert not restated, f"{cls.__name__}.__init__ restates config fields {restated}"
    assert "config" in params
    # every field is described once, in the config's docstring
    doc = config_class.__doc__ or ""
    for field in config_class.names():
        assert field in doc, f"{config_class.__name__} does not describe {field!r}"


@pytest.mark.parametrize("name", sorted(set(PROGRAMS) - {"eor"}))
def test_a_default_program_runs_with_its_configs_defaults(name: str) -> None:
    prog = build_program(name)
    assert prog.config() == prog.config_class().to_dict()


def test_the_config_is_used_and_keywords_override_it() -> None:
    """ToCConfig / VerDICtConfig used to be inert (the constructors restated the defaults)."""
    from ambiqa.programs.toc import ToCConfig, TreeOfClarifications
    from ambiqa.programs.verdict import VerDICt, VerDICtConfig

    assert VerDICt(None, VerDICtConfig(min_cluster_size=3)).min_cluster_size == 3

    toc = TreeOfClarifications(None, ToCConfig(max_depth=2, k=3), k=4)
    assert (toc.max_depth, toc.k) == (2, 4)
    assert toc.settings == ToCConfig(max_depth=2, k=4)
    verdict = VerDICt(None, {"n_passages": 9}, rerank_depth=0)
    assert (verdict.n_passages, verdict.rerank_depth) == (9, 0)


def test_a_changed_config_default_changes_the_program(monkeypatch) -> None:
    """The config is the single source: a default changed there is the program's default."""
    from ambiqa.programs import toc as toc_module

    fields = {f.name: f for f in dataclasses.fields(toc_module.ToCConfig)}
    monkeypatch.setattr(fields["max_nodes"], "default", 7)
    changed = dataclasses.make_dataclass(
        "ToCConfig", [(f.name, f.type, f) for f in fields.values()],
        bases=(ProgramConfig,), frozen=True)
    monkeypatch.setattr(toc_module, "ToCConfig", changed)
    monkeypatch.setattr(toc_module.TreeOfClarifications, "config_class", changed)
    assert resolve_config(changed).max_nodes == 7
    assert toc_module.TreeOfClarifications().max_nodes == 7


def test_unknown_settings_and_wrong_config_types_are_refused() -> None:
    from ambiqa.programs.diva import Diva, DivaConfig

    with pytest.raises(TypeError, match="top_kk"):
        Diva(None, top_kk=3)
    with pytest.raises(TypeError, match="DivaConfig"):
        Diva(None, 5)
    with pytest.raises(ConfigError, match="bad settings"):
        build_program("diva", top_kk=3)
    with pytest.raises(ConfigError, match="top_k"):
        Diva(None, DivaConfig(), top_k=0)
