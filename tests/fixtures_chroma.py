"""A real Chroma server for tests: ``chroma run`` on 127.0.0.1 and a free port, once per session.

Use it from a test module with ``pytest_plugins = ["tests.fixtures_chroma"]`` (or by importing
``chroma_server`` in ``tests/conftest.py``). The server is always stopped, even when tests fail.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

HOST = "127.0.0.1"
STARTUP_SECONDS = 60.0
STOP_SECONDS = 10.0


@dataclass(frozen=True)
class ChromaServer:
    """Where the test server listens and keeps its data."""

    host: str
    port: int
    path: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def _chroma_executable() -> str | None:
    beside_python = Path(sys.executable).with_name("chroma")
    if beside_python.is_file():
        return str(beside_python)
    return shutil.which("chroma")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def _heartbeat_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=1) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _wait_until_ready(server: ChromaServer, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"chroma run exited with {process.returncode}:\n{log.read_text(errors='replace')}"
            )
        if _heartbeat_ok(server.url):
            return
        time.sleep(0.2)
    raise RuntimeError(f"chroma run did not answer its heartbeat within {STARTUP_SECONDS}s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=STOP_SECONDS)


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    """Start ``chroma run --path DIR --host 127.0.0.1 --port PORT``; stop it after the session."""
    executable = _chroma_executable()
    if executable is None:
        pytest.skip('the chroma CLI is not installed: pip install "rag-fusion-chain[chroma]"')
    directory = tmp_path_factory.mktemp("chroma-server")
    server = ChromaServer(host=HOST, port=_free_port(), path=directory / "data")
    log = directory / "server.log"
    command = [executable, "run", "--path", str(server.path), "--host", HOST]
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            [*command, "--port", str(server.port)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
        )
    try:
        _wait_until_ready(server, process, log)
        yield server
    finally:
        _stop(process)
