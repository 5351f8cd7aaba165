"""Offline means offline: the CLI reaches no host but loopback and writes nothing in HOME but its own.

Each command runs in a child process with an empty HOME and a ``sitecustomize`` (first on
``PYTHONPATH``, so it also runs in the kit's own child processes, e.g. the one-time OpenVINO
conversion) whose audit hook records every ``socket.getaddrinfo`` and ``socket.connect``. After
the commands, HOME may hold only the kit's cache and config folders: anything else was written by
the kit or a library under it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KIT_FOLDERS = (Path(".cache", "rag-fusion-chain"), Path(".config", "rag-fusion-chain"))
LOOPBACK = ("127.0.0.1", "localhost", "::1")
COMMAND_TIMEOUT = 300
SERVER_START_TIMEOUT = 120
QUESTION = "How does solar power reach the grid?"

AUDIT_HOOK = """
import json, os, sys

_log = os.environ["RAG_FUSION_AUDIT_LOG"]

def _record(event, args):
    if event == "socket.getaddrinfo":
        host = args[0]
    elif event == "socket.connect":
        address = args[1]
        host = address[0] if isinstance(address, tuple) else "unix:" + str(address)
    else:
        return
    if isinstance(host, bytes):
        host = host.decode()
    with open(_log, "a", encoding="utf-8") as file:
        file.write(json.dumps([event, str(host)]) + "\\n")

sys.addaudithook(_record)
"""


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An empty HOME, the audit hook's folder and log, and a small folder to index."""
    root = tmp_path_factory.mktemp("privacy")
    paths = {name: root / name for name in ("home", "hook", "work", "corpus")}
    for path in paths.values():
        path.mkdir()
    (paths["hook"] / "sitecustomize.py").write_text(AUDIT_HOOK, "utf-8")
    (paths["corpus"] / "solar.md").write_text(
        "# Solar power\n\nPhotovoltaic panels turn sunlight into direct current; an inverter "
        "makes the alternating current that the grid carries to homes.\n",
        "utf-8",
    )
    (paths["corpus"] / "wind.txt").write_text(
        "Wind turbines spin a generator; blade fatigue limits how long they last.\n", "utf-8"
    )
    paths["log"] = root / "audit.jsonl"
    return paths


def child_environment(sandbox: dict[str, Path]) -> dict[str, str]:
    """The user's environment as a new user has it: empty HOME, no CI marker, no model settings."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("XDG_", "RAG_FUSION_", "OPENAI_", "IR_DATASETS", "MPLCONFIG"))
        and key not in ("CI", "TF_BUILD", "JENKINS_URL", "PYTHONPATH")
    }
    environment.update(
        HOME=str(sandbox["home"]),
        PYTHONPATH=os.pathsep.join([str(sandbox["hook"]), str(ROOT)]),
        RAG_FUSION_AUDIT_LOG=str(sandbox["log"]),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    return environment


def cli(*arguments: str) -> list[str]:
    return [sys.executable, "-c", "from rag_fusion_chain.cli import main; main()", *arguments]


def run_cli(sandbox: dict[str, Path], *arguments: str) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(
        cli(*arguments),
        env=child_environment(sandbox),
        cwd=sandbox["work"],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    return completed


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve_one_request(sandbox: dict[str, Path], index: Path) -> dict[str, object]:
    """Start ``rag-fusion serve``, send one question over 127.0.0.1, stop the server."""
    port = free_port()
    server = subprocess.Popen(
        cli("serve", "--index", str(index), "--port", str(port)),
        env=child_environment(sandbox),
        cwd=sandbox["work"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/rag-fusion/invoke",
            data=json.dumps({"input": {"question": QUESTION}}).encode(),
            headers={"Content-Type": "application/json"},
        )
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while True:
            assert server.poll() is None, server.communicate()[1][-2000:]
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    return json.loads(response.read())  # type: ignore[no-any-return]
            except (ConnectionError, urllib.error.URLError):
                assert time.monotonic() < deadline, "the server did not start in time"
                time.sleep(0.5)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)


def hosts_reached(log: Path) -> set[str]:
    if not log.exists():
        return set()
    return {line for line in log.read_text("utf-8").splitlines() if line}


def written_outside_the_kit(home: Path) -> list[str]:
    """Files and folders in ``home`` that are not the kit's folders (nor their parents)."""
    allowed_parents = {parent for folder in KIT_FOLDERS for parent in folder.parents}
    found = []
    for path in sorted(home.rglob("*")):
        relative = path.relative_to(home)
        if relative in allowed_parents or any(
            relative == folder or folder in relative.parents for folder in KIT_FOLDERS
        ):
            continue
        found.append(str(relative))
    return found


def is_loopback(line: str) -> bool:
    _, host = json.loads(line)
    return host in LOOPBACK or host.startswith("unix:")


def test_the_audit_hook_records_look_ups_in_child_processes(sandbox: dict[str, Path]) -> None:
    environment = child_environment(sandbox)
    environment["RAG_FUSION_AUDIT_LOG"] = str(sandbox["work"] / "sanity.jsonl")
    subprocess.run(
        [sys.executable, "-c", "import socket; socket.getaddrinfo('localhost', 9)"],
        env=environment,
        timeout=60,
        check=True,
    )
    assert hosts_reached(sandbox["work"] / "sanity.jsonl") == {
        '["socket.getaddrinfo", "localhost"]'
    }


@pytest.mark.timeout(4 * COMMAND_TIMEOUT)
def test_demo_index_ask_and_serve_reach_only_loopback_and_write_only_their_folders(
    sandbox: dict[str, Path],
) -> None:
    index = sandbox["work"] / "index"
    run_cli(sandbox, "demo")
    run_cli(sandbox, "index", str(sandbox["corpus"]), "--out", str(index))
    chroma = sandbox["work"] / "chroma-index"
    run_cli(sandbox, "index", str(sandbox["corpus"]), "--out", str(chroma), "--store", "chroma")
    asked = run_cli(sandbox, "ask", "--index", str(index), QUESTION)
    served = serve_one_request(sandbox, index)

    assert "inverter" in asked.stdout  # the commands really ran on the folder
    assert "output" in served
    reached = hosts_reached(sandbox["log"])
    assert [line for line in reached if not is_loopback(line)] == []
    assert written_outside_the_kit(sandbox["home"]) == []


PLOT_FIRST = (
    "import sys; from rag_fusion_chain.evaluate.report import Summary, write_plot; "
    "write_plot(sys.argv[1], Summary('tiny', {'bm25': {'ndcg@10': 0.5}, 'dense': {'ndcg@10': 0.6}}))"
)


@pytest.mark.parametrize(
    "program",
    ["from rag_fusion_chain.evaluate import metrics; metrics.eval_library('ranx')", PLOT_FIRST],
    ids=["ranx", "plot-before-ranx"],
)
def test_the_evaluation_library_writes_only_in_the_kit_cache(tmp_path: Path, program: str) -> None:
    """ranx imports ir_datasets and matplotlib, which would make ~/.ir_datasets and a font cache;
    a plot drawn before any ranx call would make ~/.config/matplotlib."""
    sandbox = {name: tmp_path / name for name in ("home", "hook", "work")}
    for path in sandbox.values():
        path.mkdir()
    sandbox["log"] = tmp_path / "audit.jsonl"
    (sandbox["hook"] / "sitecustomize.py").write_text(AUDIT_HOOK, "utf-8")
    subprocess.run(
        [sys.executable, "-c", program, str(sandbox["work"] / "plot.png")],
        env=child_environment(sandbox),
        timeout=COMMAND_TIMEOUT,
        check=True,
    )
    assert (sandbox["home"] / ".cache" / "rag-fusion-chain").is_dir()
    assert written_outside_the_kit(sandbox["home"]) == []
    assert hosts_reached(sandbox["log"]) == set()


def test_reading_a_pdf_starts_no_onnx_runtime_and_writes_nothing_in_home(tmp_path: Path) -> None:
    """pymupdf 2 loads an ONNX layout model on import; its onnxruntime writes ~/.cache/Microsoft
    and has telemetry of its own. The kit reads the text without it."""
    from rag_fusion_chain.ingest.files import import_pymupdf

    sandbox = {name: tmp_path / name for name in ("home", "hook", "work")}
    for path in sandbox.values():
        path.mkdir()
    sandbox["log"] = tmp_path / "audit.jsonl"
    (sandbox["hook"] / "sitecustomize.py").write_text(AUDIT_HOOK, "utf-8")
    pdf_path = sandbox["work"] / "solar.pdf"
    with import_pymupdf().open() as pdf:
        pdf.new_page().insert_text((72, 72), "Solar panels feed the grid through an inverter.")
        pdf.save(pdf_path)
    program = (
        "import sys; from rag_fusion_chain import ingest; "
        "documents = ingest.load([sys.argv[1]]); "
        "print(documents[0].page_content.strip(), 'onnxruntime' in sys.modules)"
    )
    read = subprocess.run(
        [sys.executable, "-c", program, str(pdf_path)],
        env=child_environment(sandbox),
        timeout=COMMAND_TIMEOUT,
        check=True,
        capture_output=True,
        text=True,
    )
    assert read.stdout.split() == [
        *["Solar", "panels", "feed", "the", "grid", "through", "an", "inverter."],
        "False",
    ]
    assert written_outside_the_kit(sandbox["home"]) == []
    assert hosts_reached(sandbox["log"]) == set()


def test_every_cache_folder_follows_xdg_cache_home(tmp_path: Path) -> None:
    """The served indexes, the OpenVINO export and the evaluation's embeddings share one root."""
    program = (
        "from rag_fusion_chain import encoders, evaluate, serving; "
        "print(serving.DEFAULT_CACHE_DIR, encoders.DEFAULT_EXPORT_DIR, evaluate.DEFAULT_CACHE_DIR)"
    )
    printed = subprocess.run(
        [sys.executable, "-c", program],
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=True,
    ).stdout.split()
    kit = tmp_path / "rag-fusion-chain"
    assert printed == [str(kit / "indexes"), str(kit / "openvino"), str(kit / "embeddings")]
