"""Fixtures of the scale tests: a real PostgreSQL server, the fake OpenAI-compatible endpoint,
and the environment of an ``ambiqa`` subprocess.

PostgreSQL comes from ``$AMBIQA_TEST_PG_URL`` when set (a server CI started, e.g.
``postgresql://postgres@127.0.0.1:5432/postgres``), else from a throwaway cluster this fixture
creates with the Debian packages' ``initdb`` and ``pg_ctl`` in a temporary directory, on a
free loopback port, with trust authentication, stopped and deleted afterwards. PostgreSQL
refuses to run as root, so under root the cluster runs as the ``postgres`` user the Debian
package creates. Without either, the tests that need it skip and say why.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# the ambiqa subprocess environment the fault tests use (one definition)
from tests.faults.conftest import cli_env  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
PG_URL_ENV = "AMBIQA_TEST_PG_URL"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_bin() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                  key=lambda d: int(Path(d).parent.name) if Path(d).parent.name.isdigit() else 0)
    return Path(dirs[-1]) if dirs else None


def _as_postgres() -> list[str]:
    """The prefix that runs a command as a user PostgreSQL accepts (not root)."""
    if os.geteuid() != 0:
        return []
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("running as root and no 'postgres' user exists to run a throwaway "
                    f"PostgreSQL cluster; set {PG_URL_ENV} to a server instead")
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.skip("running as root without runuser to start PostgreSQL as 'postgres'")
    return [runuser, "-u", "postgres", "--"]


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A PostgreSQL URL for Optuna (a CI server, or a throwaway cluster)."""
    given = os.environ.get(PG_URL_ENV)
    if given:
        yield given
        return
    bindir = _pg_bin()
    if bindir is None or not (bindir / "initdb").exists():
        pytest.skip(f"no PostgreSQL: set {PG_URL_ENV}, or install the server "
                    "(apt-get install -y postgresql) so a throwaway cluster can be started")
    prefix = _as_postgres()
    base = Path(tempfile.mkdtemp(prefix="ambiqa-pg-"))
    if prefix:
        shutil.chown(base, user="postgres", group="postgres")
    data, log, port = base / "data", base / "server.log", _free_port()

    def run(*cmd: str) -> None:
        res = subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            detail = res.stderr[-1500:] + (log.read_text()[-1500:] if log.exists() else "")
            shutil.rmtree(base, ignore_errors=True)
            pytest.fail(f"{' '.join(cmd[:2])} failed: {detail}")

    run(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
        "-E", "UTF8", "--no-sync")
    run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o",
        f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast",
                        "-w", "stop"], capture_output=True, timeout=120)
        shutil.rmtree(base, ignore_errors=True)


def load_fake_server():
    """:mod:`ambiqa.testing_server`, the repository's fake endpoint."""
    from ambiqa import testing_server

    return testing_server


