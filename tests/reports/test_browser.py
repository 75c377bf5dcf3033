"""The report and comparison pages opened in a real headless browser (Debian's Chromium):
the plots are there and decode, the worst-questions section is there, the data's would-be
markup stays text, and the page loads nothing from outside itself.

Skipped, saying why, where Chromium is not installed (``apt-get install chromium
chromium-driver``; CI installs both).
"""

from __future__ import annotations

import base64
import io
import json
import shutil
import socket
import subprocess
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from ambiqa.cli import main
from ambiqa.evaluation.reports.report import write_run_report
from tests.reports.conftest import EVIL_QUESTION, SCORES_A, SCORES_B

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser"))
                 if p), None)
CHROMEDRIVER = shutil.which("chromedriver")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium "
                             "chromium-driver); the page checks need a real browser")


class _Dom(HTMLParser):
    """The elements the checks look at, from the DOM the browser serialised."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict[str, str]] = []
        self.scripts = 0
        self.headings: list[tuple[str, str]] = []  # (id, text)
        self.details = 0
        self.external: list[str] = []
        self._heading: tuple[str, list[str]] | None = None
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "img":
            self.images.append(a)
        if tag == "script":
            self.scripts += 1
        if tag == "details":
            self.details += 1
        if tag in ("h1", "h2", "h3"):
            self._heading = (a.get("id", ""), [])
        for key in ("src", "href"):
            if a.get(key) and not a[key].startswith(("data:", "#")):
                self.external.append(a[key])

    def handle_endtag(self, tag: str) -> None:
        if tag in ("h1", "h2", "h3") and self._heading:
            self.headings.append((self._heading[0], "".join(self._heading[1]).strip()))
            self._heading = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._heading:
            self._heading[1].append(data)


def dump_dom(page: Path, tmp_path: Path) -> _Dom:
    profile = tmp_path / f"profile-{page.stem}"
    done = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom",
                           page.resolve().as_uri()], capture_output=True, text=True,
                          timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "</html>" in done.stdout, "the browser serialised no page"
    dom = _Dom()
    dom.feed(done.stdout)
    return dom


def assert_pngs_decode(dom: _Dom, n: int) -> None:
    from PIL import Image

    assert len(dom.images) == n
    for img in dom.images:
        src = img["src"]
        assert src.startswith("data:image/png;base64,")
        with Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))) as im:
            im.load()  # decodes every pixel
            assert im.format == "PNG" and im.width > 300 and im.height > 200
        assert img.get("alt")


@pytest.fixture()
def pages(make_asqa_run, tmp_path: Path) -> dict[str, Path]:
    a = make_asqa_run("vanilla", SCORES_A, program="vanilla_rag")
    b = make_asqa_run("diva", SCORES_B, program="diva")
    write_run_report(a)
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 0
    return {"report": a / "report.html", "compare": tmp_path / "cmp" / "compare.html"}


def test_report_page_in_a_browser(pages, tmp_path):
    dom = dump_dom(pages["report"], tmp_path)
    assert_pngs_decode(dom, 2)  # headline distributions, cost and latency
    titles = [t for _, t in dom.headings]
    assert "The 10 worst questions by dr" in titles
    worst = titles[titles.index("The 10 worst questions by dr") + 1:]
    assert len([t for t in worst if t[:1].isdigit()]) == 10
    assert dom.details == 9  # the passages each read, folded (the failed one read none)
    assert dom.scripts == 0 and not dom.external
    assert any(EVIL_QUESTION in t for t in titles)  # the data's <script> is text


def test_compare_page_in_a_browser(pages, tmp_path):
    dom = dump_dom(pages["compare"], tmp_path)
    assert_pngs_decode(dom, 2)  # forest plot, quality against cost
    alts = [img["alt"] for img in dom.images]
    assert alts[0] == "paired differences against vanilla_rag"
    titles = [t for _, t in dom.headings]
    assert "Paired differences against vanilla_rag" in titles and "Setup" in titles
    assert dom.scripts == 0 and not dom.external


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wd(port: int, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=json.dumps(body or {}).encode() if body is not None
                                 else None, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read() or b"{}").get("value")


@pytest.mark.skipif(CHROMEDRIVER is None, reason="chromedriver is not installed "
                                                 "(apt-get install chromium-driver)")
def test_images_decode_in_the_browser_and_nothing_else_loads(pages, tmp_path):
    """Through the WebDriver protocol on the loopback: the browser itself reports every
    image decoded (naturalWidth > 0) and no resource fetched beyond the page."""
    port = _free_port()
    driver = subprocess.Popen([CHROMEDRIVER, f"--port={port}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                _wd(port, "GET", "/status")
                break
            except OSError:
                time.sleep(0.1)
        caps = {"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": [*FLAGS, f"--user-data-dir={tmp_path / 'wd-profile'}"]}}}}
        session = _wd(port, "POST", "/session", caps)["sessionId"]
        try:
            for page in pages.values():
                _wd(port, "POST", f"/session/{session}/url", {"url": page.resolve().as_uri()})
                got = _wd(port, "POST", f"/session/{session}/execute/sync", {
                    "script": "return {images: [...document.images].map(i => "
                              "[i.complete, i.naturalWidth, i.naturalHeight]), "
                              "loads: performance.getEntriesByType('resource')"
                              ".map(e => e.name).filter(n => !n.startsWith('data:')), "
                              "worst: !!document.getElementById('the-10-worst-questions-by-dr')"
                              "}", "args": []})
                assert len(got["images"]) == 2, page
                assert all(c and w > 300 and h > 200 for c, w, h in got["images"]), got
                assert got["loads"] == []
                assert got["worst"] == (page.name == "report.html")
        finally:
            _wd(port, "DELETE", f"/session/{session}")
    finally:
        driver.terminate()
        driver.wait(timeout=30)
