"""The one integer check: its bounds and the one-line messages every layer shares."""

from __future__ import annotations

import pytest

from ambiqa.checks import check_int
from ambiqa.errors import ConfigError


def test_in_range_values_come_back_unchanged():
    assert check_int("k", 1) == 1
    assert check_int("nway", 2, 2) == 2
    assert check_int("dim", 384, 8, maximum=384) == 384
    assert check_int("k", None, none_ok=True) is None


@pytest.mark.parametrize(("args", "kwargs", "message"), [
    (("k", 0), {}, "k must be a positive integer, got 0"),
    (("k", True), {}, "k must be a positive integer, got True"),
    (("k", "3"), {"none_ok": True}, "k must be a positive integer or None, got '3'"),
    (("bsize", 1, 2), {}, "bsize must be an integer >= 2, got 1"),
    (("dim", 385, 8), {"maximum": 384}, r"dim must be an integer in 8\.\.384, got 385"),
    (("doc_maxlen", 7, 8), {"maximum": 512}, r"doc_maxlen must be an integer in 8\.\.512, got 7"),
])
def test_bad_values_name_the_setting_and_the_bound(args, kwargs, message):
    with pytest.raises(ConfigError, match=f"^{message}$"):
        check_int(*args, **kwargs)


def test_hint_travels_with_the_error():
    with pytest.raises(ConfigError) as err:
        check_int("dim", 1000, 8, maximum=384, hint="384 is MiniLM's width")
    assert err.value.hint == "384 is MiniLM's width"
