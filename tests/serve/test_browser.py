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
import time
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


#: what the page shows when it is done with a question: the answer settled
#: (``body[data-state]``) and the program description arrived (``body[data-described]``).
#: The two fetches race, so waiting on the answer alone once read "loading the program
#: description" in CI.
PAGE_DONE = "document.body.dataset.state && document.body.dataset.described"


class _Cdp:
    """Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
    JSON messages separated by NUL on fds 3 and 4), so a test waits in real time for what
    the page shows -- the page reads a streamed answer, which Chromium's virtual time
    (``--virtual-time-budget``) does not wait for -- with the standard library only."""

    def __init__(self, profile: str) -> None:
        import fcntl

        def high(fd: int) -> int:  # off 3 and 4, which the shell below reassigns
            moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
            os.close(fd)
            return moved

        to_chrome_r, self._to_chrome = map(high, os.pipe())
        self._from_chrome, from_chrome_w = map(high, os.pipe())

        # bash puts the pipes on fds 3 (our commands) and 4 (replies), then is Chromium
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}',
             CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
             "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            pass_fds=(to_chrome_r, from_chrome_w),
            env={**os.environ, "HOME": profile})
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next = 0
        self._buffer = b""

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout_s: float = 60.0) -> dict:
        import json
        import select

        self._next += 1
        message = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        end = time.monotonic() + timeout_s
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._next:
                    if "error" in reply:
                        raise RuntimeError(str(reply["error"]))
                    return reply.get("result", {})
            left = end - time.monotonic()
            assert left > 0, f"Chromium gave no reply to {method} in {timeout_s} s"
            ready, _, _ = select.select([self._from_chrome], [], [], left)
            if ready:
                data = os.read(self._from_chrome, 1 << 16)
                assert data, "Chromium closed the pipe: " + self.proc.stderr.read().decode(
                    errors="replace")[-2000:]
                self._buffer += data

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout_s=10)
        except (AssertionError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)


def dump_dom(url: str, budget_ms: int = 20000, done: str = PAGE_DONE) -> str:
    """The DOM once the page's scripts are done: ``done`` (a JS expression) is true, or
    ``budget_ms`` of real time passed."""
    with tempfile.TemporaryDirectory() as profile:
        cdp = _Cdp(profile)
        try:
            target = cdp.call("Target.createTarget", {"url": url})["targetId"]
            session = cdp.call("Target.attachToTarget",
                               {"targetId": target, "flatten": True})["sessionId"]
            wait = (f"location.href === 'about:blank' ? null : new Promise(resolve => {{"
                    f" const t0 = Date.now(); (function poll() {{"
                    f" if ((document.readyState === 'complete' && ({done}))"
                    f" || Date.now() - t0 > {budget_ms}) resolve("
                    f"document.documentElement.outerHTML); else setTimeout(poll, 20);"
                    f" }})(); }})")
            for _ in range(300):  # until the page, not about:blank, answers
                try:
                    result = cdp.call("Runtime.evaluate",
                                      {"expression": wait, "awaitPromise": True,
                                       "returnByValue": True}, session=session,
                                      timeout_s=budget_ms / 1000 + 60)
                except RuntimeError as exc:  # the navigation replaced the context
                    if "context was destroyed" not in str(exc):
                        raise
                    continue
                html = result.get("result", {}).get("value")
                if html:
                    return "<!doctype html>" + html
                time.sleep(0.05)
            raise AssertionError(f"the page {url} never loaded")
        finally:
            cdp.close()


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


def test_page_shows_the_answer_as_it_is_written(make_served, live_server):
    """The LM is the fake OpenAI-compatible server, streaming its replies word by word: the
    page shows the first words before the last ones come, then the whole answer."""
    from ambiqa import testing_server
    from ambiqa.lm import endpoint_lm

    url, shutdown = testing_server.serve(delay=0.05, chunk_delay=0.05)
    try:
        served = make_served(endpoint_lm("openai/fake", api_base=url, cache=False))
        srv = live_server(create_app(served))
        html = dump_dom(f"{srv.url}/?q={urllib.parse.quote('Who played Jo March?')}")
    finally:
        shutdown()
    dom = _Dom()
    dom.feed(html)
    assert "Answered in" in dom.by_id["status"], dom.by_id["status"]
    answer = dom.attrs_of["answer"]
    final = dom.by_id["answer"]
    assert int(answer["data-chunks"]) > 3  # shown chunk by chunk
    first = answer["data-first-text"]
    assert first and final.startswith(first) and len(first) < len(final)
    assert float(dom.by_id["first-chunk"]) > 0  # seconds to the first words, from `done`
    assert len(dom.by_class["interp"]) == 2 and len(dom.by_class["cite-sentence"]) == 2
    assert shutdown.server.streamed == 2  # both LM calls streamed
