"""The document model: one build, Markdown and HTML renderings, data always escaped."""

from __future__ import annotations

from ambiqa.evaluation.reports.html import (
    Bold,
    Bullets,
    Code,
    Details,
    Document,
    Heading,
    Image,
    Para,
    Quote,
    Table,
)

EVIL = "<script>alert(1)</script> \"quoted\" & | pipe\nnext line"


def _doc() -> Document:
    return Document(f"Run {EVIL}").add(
        Heading(2, "Section"),
        Para(["plain ", Code("a`b"), " and ", Bold(EVIL)]),
        Bullets([EVIL, [Code("x|y")]]),
        Table(["name", "value"], [[EVIL, "1.000"], ["", "2"]], "lr"),
        Quote(EVIL),
        Details("passages", [Para(EVIL)]),
        Image("missing plot", "plots/none.png"))


def test_html_escapes_every_string_from_the_data_and_needs_no_network(tmp_path):
    page = _doc().html(tmp_path)
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&quot;quoted&quot; &amp; | pipe" in page
    assert '<td class="r">1.000</td>' in page  # numbers right-aligned
    assert "<details><summary>passages</summary>" in page
    assert 'class="missing">plot missing: plots/none.png' in page
    assert "default-src 'none'; img-src data:" in page  # the browser may load nothing else
    assert "http://" not in page and "https://" not in page


def test_markdown_keeps_tables_whole_and_opens_no_raw_tag(tmp_path):
    md = _doc().markdown()
    assert md.startswith("# Run &lt;script>alert(1)&lt;/script>")
    row = next(line for line in md.splitlines() if line.startswith("| &lt;script"))
    assert row.endswith("| 1.000 |") and "\\| pipe next line" in row  # one line, pipe escaped
    assert "|---|---:|" in md and "| | 2 |" in md  # an empty cell stays a cell
    assert "`` a`b ``" in md and "`x|y`" in md
    assert "<script" not in md and "<img" not in md
    assert "![missing plot](plots/none.png)" in md


def test_sections_get_an_in_page_contents_line(tmp_path):
    doc = Document("t").add(*(Heading(2, f"Part <{k}>") for k in range(3)))
    page = doc.html(tmp_path)
    assert '<nav class="toc"><a href="#part-0">Part &lt;0&gt;</a> · ' in page
    assert '<h2 id="part-2">Part &lt;2&gt;</h2>' in page


def test_an_existing_png_is_embedded_as_base64(tmp_path):
    png = tmp_path / "plots" / "p.png"
    png.parent.mkdir()
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 16)
    page = Document("t").add(Image("a plot", "plots/p.png")).html(tmp_path)
    assert '<img src="data:image/png;base64,iVBORw0KGgo' in page
    assert 'alt="a plot"' in page
