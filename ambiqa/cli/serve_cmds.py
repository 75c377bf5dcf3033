"""``ambiqa serve ARTIFACT``: answer questions over HTTP with one compiled program.

The server binds 127.0.0.1 unless told otherwise, and refuses to bind anything else without a
bearer token (read from an environment variable, like API keys, so it never appears in the
process list). It starts listening at once and loads the LM and the index in the background,
then warms the program up (the sentence encoder, a ColBERT searcher: each step logged with its
duration); ``/readyz`` turns 200 when that is done. SIGTERM or Ctrl-C stops accepting
connections, lets requests in flight finish (up to the request timeout), then exits.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ambiqa.cli.common import add_index_args, add_lm_args, finite_seconds, lm_spec
from ambiqa.errors import AmbiqaError, ConfigError


def _token(args: argparse.Namespace) -> str | None:
    if not args.token_env:
        return None
    value = os.environ.get(args.token_env, "")
    if not value.strip():
        raise ConfigError(f"--token-env {args.token_env}: that environment variable is not set",
                          hint=f"export {args.token_env}=<a long random string>")
    from ambiqa.lm.redact import register_secret

    register_secret(value.strip())  # never echoed in a log or an error body
    return value.strip()


def _show_serve_log(level: str) -> None:
    """Print the app's own log lines (start-up, warm-up steps with their durations, "ready")
    on stderr at uvicorn's level: uvicorn configures only its own loggers, so without this
    the warm-up and "ready" lines (INFO) were never seen (issue 42)."""
    import logging

    logger = logging.getLogger("ambiqa.serve")
    wanted = logging.getLevelName(level.upper())
    # the level goes on our handler; the logger is only ever opened further (to let INFO
    # through), never closed: `serve --log-level critical` run in-process (a test, a script)
    # must not silence the app's warnings for everything that runs after it
    if logger.getEffectiveLevel() > wanted:
        logger.setLevel(wanted)
    handler = next((h for h in logger.handlers if getattr(h, "_ambiqa_serve", False)), None)
    if handler is None:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler._ambiqa_serve = True  # type: ignore[attr-defined]  # added once per process
        logger.addHandler(handler)
    handler.setLevel(wanted)


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ambiqa.serve.app import check_bind, create_app
    except ImportError as exc:
        raise ConfigError(f"ambiqa serve needs FastAPI and uvicorn ({exc.name} is missing)",
                          hint="pip install fastapi uvicorn") from exc
    from ambiqa.api.loader import read_program_file
    from ambiqa.serve.loading import load_served

    token = _token(args)
    check_bind(args.host, token)
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be 0-65535, got {args.port}")
    if args.concurrency is not None and args.concurrency < 1:
        raise ConfigError(f"--concurrency must be >= 1, got {args.concurrency}")
    # read and validated once, now: a wrong path, a broken file, or a program that needs a
    # retriever with no index to open fails before the port opens, never as a "ready" server
    # whose every answer is an error (the same refusal as ask and ambiqa.load)
    program_file = read_program_file(args.artifact)
    program_file.check_start(given=bool(args.index))

    def load() -> Any:
        return load_served(program_file, lm=lm_spec(args),
                           index=args.index, index_root=args.index_root,
                           concurrency=args.concurrency)

    failure: list[BaseException] = []
    server: uvicorn.Server | None = None

    def on_load_failed(exc: BaseException) -> None:
        failure.append(exc)
        if server is not None:
            server.should_exit = True

    app = create_app(load, queue=args.queue, timeout_s=args.timeout, token=token,
                     on_load_failed=on_load_failed)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                            lifespan="on", timeout_graceful_shutdown=int(args.timeout) + 5,
                            server_header=False, access_log=args.access_log)
    server = uvicorn.Server(config)
    _show_serve_log(args.log_level)
    where = f"http://{args.host}:{args.port}/" if args.port else "a free port (uvicorn's log)"
    print(f"ambiqa serve: {args.artifact} on {where} "
          f"(loading the LM and index, then warming up; /readyz says when ready)", flush=True)
    server.run()
    if failure:
        exc = failure[0]
        if isinstance(exc, AmbiqaError):
            raise exc
        raise RuntimeError(f"loading failed: {exc}") from exc
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``serve`` to the top-level parser."""
    p = sub.add_parser("serve", help="answer questions over HTTP with a compiled program")
    p.add_argument("artifact", help="compiled program (JSON artifact)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; any other needs --token-env)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--token-env", default=None,
                   help="environment variable holding the bearer token /v1/* requires")
    p.add_argument("--concurrency", type=int, default=None,
                   help="program calls at once (default: the embedded LM's slots; 4 for an "
                        "endpoint)")
    p.add_argument("--queue", type=int, default=16,
                   help="requests that may wait for a free slot; more get 503 (default 16)")
    p.add_argument("--timeout", type=finite_seconds, default=120.0,
                   help="seconds per request, queueing included; later is 504 (default 120)")
    p.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level (default info)")
    p.add_argument("--access-log", action="store_true", help="log one line per request")
    add_index_args(p)
    add_lm_args(p)
    p.set_defaults(fn=cmd_serve)
