"""Numeric environment settings: defaults, bounds, and errors that name the variable."""

from __future__ import annotations

import pytest

from ambiqa.envutil import env_int, env_seconds
from ambiqa.errors import ConfigError
from ambiqa.parallel import default_workers


def test_env_int_default_value_and_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AMBIQA_X", raising=False)
    assert env_int("AMBIQA_X", 7) == 7
    monkeypatch.setenv("AMBIQA_X", "  ")
    assert env_int("AMBIQA_X", 7) == 7
    monkeypatch.setenv("AMBIQA_X", "3")
    assert env_int("AMBIQA_X", 7, minimum=1) == 3
    monkeypatch.setenv("AMBIQA_X", "0")
    with pytest.raises(ConfigError, match=r"\$AMBIQA_X must be >= 1, got 0"):
        env_int("AMBIQA_X", 7, minimum=1)
    monkeypatch.setenv("AMBIQA_X", "four")
    with pytest.raises(ConfigError, match=r"\$AMBIQA_X must be an integer, got 'four'"):
        env_int("AMBIQA_X", 7)


def test_env_seconds_zero_means_no_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMBIQA_T", "2.5")
    assert env_seconds("AMBIQA_T", None) == 2.5
    monkeypatch.setenv("AMBIQA_T", "0")
    assert env_seconds("AMBIQA_T", 9.0) is None
    monkeypatch.setenv("AMBIQA_T", "soon")
    with pytest.raises(ConfigError, match=r"\$AMBIQA_T must be a number of seconds"):
        env_seconds("AMBIQA_T", None)


def test_bad_parallel_setting_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMBIQA_PARALLEL", "many")
    with pytest.raises(ConfigError, match="AMBIQA_PARALLEL"):
        default_workers()
