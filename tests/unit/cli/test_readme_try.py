"""The README's "Try it in seconds" block runs as written: each ``ambiqa`` line of it, against
the fake LM server, in a scratch directory holding the examples (issue 43)."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from ambiqa.cli import main
from ambiqa.testing_server import serve

ROOT = Path(__file__).resolve().parents[3]


def readme_block() -> list[str]:
    """The block's lines, continuations joined, comments dropped."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Try it in seconds"):]
    body = section[section.index("```bash\n") + len("```bash\n"):]
    body = body[: body.index("```")].replace("\\\n", " ")
    return [re.sub(r"\s+#.*$", "", line).strip() for line in body.splitlines() if line.strip()]


def test_the_try_it_block_starts_the_fake_server_and_runs_every_command(tmp_path, monkeypatch,
                                                                       capsys):
    lines = readme_block()
    assert lines[0].startswith("python -m ambiqa.testing_server")
    assert lines[-1].startswith("kill %1")
    commands = [line for line in lines if line.startswith("ambiqa ")]
    assert [c.split()[1] for c in commands] == ["index", "ask", "evaluate", "compile", "export",
                                                "ask"]
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AMBIQA_INDEX_ROOT", str(tmp_path / "indexes"))
    url, shutdown = serve(0.0)
    try:
        fake = ["--lm", "openai/fake", "--api-base", url]
        for command in commands:
            argv = shlex.split(command.replace("$FAKE", ""))[1:]
            if "$FAKE" in command:
                argv += fake
            assert main(argv) == 0, command
            out = capsys.readouterr().out
            assert out.strip(), command
    finally:
        shutdown()
    assert (tmp_path / "runs" / "try" / "report.html").is_file()
    assert (tmp_path / "artifacts" / "try.json").is_file()
