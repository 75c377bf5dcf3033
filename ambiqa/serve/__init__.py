"""Serving a compiled program over HTTP (``ambiqa serve``): the app, admission control, the
answer payload with supporting sentences, and the page for people.

FastAPI and uvicorn are imported only here, so the rest of ambiqa works without them.
"""

from __future__ import annotations

from ambiqa.serve.loading import ServedProgram, choose_slots, has_aforward, lm_slots, load_served

__all__ = ["ServedProgram", "choose_slots", "has_aforward", "load_served", "lm_slots",
           "create_app"]


def create_app(*args, **kwargs):  # noqa: ANN002, ANN003 - forwards to ambiqa.serve.app
    """:func:`ambiqa.serve.app.create_app` (imported on use: it needs FastAPI)."""
    from ambiqa.serve.app import create_app as _create

    return _create(*args, **kwargs)
