"""Fixtures for the API tests: DSPy's global settings restored after each test (the habits
tests call ``dspy.configure`` the way a user does)."""

from __future__ import annotations

import pytest


@pytest.fixture()
def fresh_dspy():
    """DSPy's process-wide settings as a user's script would find them, restored afterwards."""
    from dspy.dsp.utils.settings import main_thread_config

    saved = dict(main_thread_config)
    main_thread_config.update(lm=None, callbacks=[], usage_tracker=None)
    yield
    main_thread_config.clear()
    main_thread_config.update(saved)
