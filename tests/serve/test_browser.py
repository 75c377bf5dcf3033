"""The page for people, in a real headless Chromium (Debian's ``chromium`` package) against a
real uvicorn serving the scripted fake LM: the page asks, and the DOM it renders shows the
answer, each interpretation with its cited passage (title, text, the marked supporting
sentence) and the LM calls and seconds. Model output is shown as text, never as HTML.

Skipped, with the reason, where Chromium is not installed (CI installs it:
``apt-get install -y chromium``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import urllib.parse
from html.parser import HTMLParser

import pytest

pytest.importorskip("fastapi", reason="ambiqa serve needs FastAPI (pip install fastapi uvicorn)")
pytest.importorskip("uvicorn", reason="ambiqa serve needs uvicorn (pip install fastapi uvicorn)")

from ambiqa.serve.app import create_app
from ambiqa.testing import vanilla_rag_lm

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium not installed (apt-get install -y chromium); "
                             "the page's browser test needs a real browser")


class _Dom(HTMLParser):
    """Text under each element id and each class (enough to read the rendered page)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.by_id: dict[str, str] = {}
        self.by_class: dict[str, list[str]] = {}
        self.attrs_of: dict[str, dict[str, str]] = {}
        self._open: list[tuple[str, str | None, list[str]]] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        self.tags.append(tag)
        if tag in ("meta", "input", "br", "img", "link"):
            return
        if a.get("id"):
            self.by_id.setdefault(a["id"], "")
            self.attrs_of[a["id"]] = a
        self._open.append((tag, a.get("id"), a.get("class", "").split()))
        for cls in a.get("class", "").split():
            self.by_class.setdefault(cls, []).append("")

    def handle_endtag(self, tag):
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i][0] == tag:
                del self._open[i:]
                break

    def handle_data(self, data):
        seen_cls: set[str] = set()
        for _, eid, classes in self._open:
            if eid:
                self.by_id[eid] += data
            for cls in classes:
                if cls not in seen_cls:
                    self.by_class[cls][-1] += data
                    seen_cls.add(cls)


def dump_dom(url: str, budget_ms: int = 20000) -> str:
    """The DOM after the page's scripts ran (virtual time waits for pending fetches)."""
    with tempfile.TemporaryDirectory() as profile:
        out = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
             f"--virtual-time-budget={budget_ms}", "--dump-dom", url],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "HOME": profile})
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_page_asks_and_shows_answer_interpretations_citations_and_cost(make_served,
                                                                      live_server):
    served = make_served(vanilla_rag_lm())
    srv = live_server(create_app(served))
    question = "Who played Jo March in <b>Little Women</b>?"
    html = dump_dom(f"{srv.url}/?q={urllib.parse.quote(question)}")
    dom = _Dom()
    dom.feed(html)
    assert dom.attrs_of["result"].get("hidden") is None, dom.by_id.get("status")
    assert "Answered in" in dom.by_id["status"]
    assert dom.by_id["answer"].startswith("Answers: ")
    assert dom.by_id["program"].startswith("vanilla_rag (optimizer none")
    # two interpretations (the scripted clarifier: one per passage, answer = its title)
    interps = dom.by_class["interp"]
    assert len(interps) == 2
    titles = dom.by_class["cite-title"]
    marked = dom.by_class["cite-sentence"]
    texts = dom.by_class["cite-text"]
    assert len(titles) == len(marked) == len(texts) == 2
    for interp, title, sentence, text in zip(interps, titles, marked, texts, strict=True):
        assert title.split(" [")[0] in interp  # the cited passage's title is the answer
        assert sentence and sentence in text  # the supporting sentence, inside the passage
    assert dom.by_id["lm-calls"] == "2"
    assert float(dom.by_id["seconds"]) >= 0.0
    # the question came back inside interpretations as text, not as markup
    assert "<b>Little Women</b>" in interps[0]
    assert "b" not in dom.tags
    assert len(served.lm.engine.calls) == 2  # the page really asked the server


def test_page_shows_the_servers_error(make_served, live_server):
    srv = live_server(create_app(make_served(vanilla_rag_lm())))
    html = dump_dom(f"{srv.url}/?q={urllib.parse.quote('?!')}")
    dom = _Dom()
    dom.feed(html)
    assert dom.by_id["status"].startswith("Error 422: ")
    assert "has no words" in dom.by_id["status"]
    assert dom.attrs_of["result"].get("hidden") is not None


def test_page_asks_for_the_token_when_the_server_needs_one(make_served, live_server):
    served = make_served(vanilla_rag_lm())
    srv = live_server(create_app(served, token="page-token"))
    html = dump_dom(f"{srv.url}/?q={urllib.parse.quote('Who played Jo March?')}")
    dom = _Dom()
    dom.feed(html)
    assert "needs an access token" in dom.by_id["status"]
    assert dom.attrs_of["token-row"].get("class") == "shown"
    assert served.lm.engine.calls == []
