"""The LangChain templates under ``templates/`` and the serving module they are built on.

Fast checks: every template package is laid out as the LangChain CLI expects, its ``chain`` is
typed ``{"question": str} -> str``, its dependencies are installed here, and its README has the
usual sections. :mod:`rag_fusion_chain.serving`: settings, the index cache (FAISS and Chroma),
and the deferred chain, indexing the sample corpus with the stub server's embeddings.

End to end (about a minute): the templates are committed to a throwaway git repository, an app is
made with ``langchain app new`` and ``langchain app add git+file://...``, served with
``langchain serve`` on 127.0.0.1, and called through ``RemoteRunnable``; its LangSmith traces go
to the recorder. The server is always stopped.

Offline: the app's environment already holds the kit, so templates are added with ``--no-pip``
and put on ``PYTHONPATH`` (what ``pip install -e`` would do; building them needs poetry-core).
langchain-cli 0.0.37 has no telemetry opt-out: ``app add`` posts an event to
app.firstpartyhq.com without a timeout, so the CLI runs here with that call replaced by a no-op.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import tomlkit
from langchain_core.tracers.langchain import LangChainTracer
from langsmith import Client
from packaging.requirements import Requirement

from rag_fusion_chain import data, offline, serving, strategies
from rag_fusion_chain.retrievers.index_directory import INDEX_FILE, read_settings, stores_directory
from tests.conftest import MODEL_ENVIRONMENT_VARIABLES
from tests.langsmith_recorder import LangSmithRecorder, Run
from tests.serving_fixtures import SAMPLE_DOCUMENTS, STUB_EMBEDDING, embedded_texts
from tests.stub_openai import StubOpenAI

pytest_plugins = ["tests.serving_fixtures"]

REPOSITORY = Path(__file__).resolve().parents[1]
TEMPLATES = REPOSITORY / "templates"
SERVED_STEPS = {"generate_queries", "retrieve", "fuse", "answer"}
LANGSMITH_VARIABLES = (
    "LANGSMITH_TRACING",
    "LANGSMITH_ENDPOINT",
    "LANGSMITH_API_KEY",
    "LANGSMITH_PROJECT",
    "LANGCHAIN_TRACING_V2",
    "LANGCHAIN_ENDPOINT",
    "LANGCHAIN_API_KEY",
    "LANGCHAIN_PROJECT",
)
CLI_WITHOUT_TELEMETRY = """
import sys
import langchain_cli.namespaces.app as app_namespace
app_namespace.create_events = lambda events: None
from langchain_cli.cli import app
app(sys.argv[1:], prog_name="langchain")
"""
"""Runs ``langchain <arguments>`` with the CLI's event posting replaced by a no-op."""


def module_name(strategy: str) -> str:
    return strategy.replace("-", "_")


def template_project(strategy: str) -> dict[str, Any]:
    return tomlkit.parse((TEMPLATES / strategy / "pyproject.toml").read_text("utf-8")).unwrap()


# ============================================================================================
# Template packages (fast)
# ============================================================================================


@pytest.fixture
def template_imports(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Template packages import during the test and are forgotten afterwards."""
    before = set(sys.modules)
    yield monkeypatch
    for name in set(sys.modules) - before:
        if name.split(".")[0] in {module_name(strategy) for strategy in strategies.STRATEGIES}:
            del sys.modules[name]


def test_there_is_one_template_per_strategy() -> None:
    assert sorted(path.name for path in TEMPLATES.iterdir() if path.is_dir()) == sorted(
        strategies.STRATEGIES
    )


@pytest.mark.parametrize("strategy", strategies.STRATEGIES)
def test_template_exports_a_chain_typed_question_to_answer(
    strategy: str, template_imports: pytest.MonkeyPatch
) -> None:
    from langchain_cli.utils.packages import get_langserve_export

    export = get_langserve_export(TEMPLATES / strategy / "pyproject.toml")
    assert export == {
        "module": f"{module_name(strategy)}.chain",
        "attr": "chain",
        "package_name": strategy,
    }
    template_imports.syspath_prepend(str(TEMPLATES / strategy))
    chain = getattr(importlib.import_module(export["module"]), export["attr"])

    schema = chain.get_input_jsonschema()
    question, text = schema["anyOf"]
    definition = schema["$defs"][question["$ref"].rsplit("/", 1)[1]]
    assert definition["required"] == ["question"] and text["type"] == "string"
    assert definition["properties"]["question"]["type"] == "string"
    assert chain.get_output_jsonschema()["type"] == "string"
    assert chain.bound.strategy == strategy


@pytest.mark.parametrize("strategy", strategies.STRATEGIES)
def test_template_dependencies_and_dev_group_resolve_here(strategy: str) -> None:
    """This environment satisfies the template and its dev group, extras included.

    An installed environment meeting every constraint is a resolution: the dev group is
    satisfiable (no ``sse-starlette>=2`` against langserve's ``<2``). The kit is not a pip
    dependency (it is not on PyPI; see test_template_without_the_kit_stops_with_one_line).
    """
    poetry = template_project(strategy)["tool"]["poetry"]
    dependencies = dict(poetry["dependencies"])
    assert "rag-fusion-chain" not in dependencies
    dependencies.update(poetry["group"]["dev"]["dependencies"])
    for name, constraint in dependencies.items():
        if name == "python":
            continue
        version = constraint["version"] if isinstance(constraint, dict) else constraint
        requirement = Requirement(f"{name}{version}")
        assert requirement.specifier.contains(importlib.metadata.version(name)), name
        extras = constraint.get("extras", []) if isinstance(constraint, dict) else []
        for extra in ["", *extras]:
            for needed in _requirements(name, extra):
                assert needed.specifier.contains(importlib.metadata.version(needed.name)), (
                    f"{name}[{extra}] needs {needed}"
                )


def _requirements(distribution: str, extra: str) -> list[Requirement]:
    """What ``distribution[extra]`` requires (``extra=""``: its plain requirements)."""
    requirements = [Requirement(text) for text in importlib.metadata.requires(distribution) or []]
    return [
        requirement
        for requirement in requirements
        if (requirement.marker is None and not extra)
        or (requirement.marker is not None and requirement.marker.evaluate({"extra": extra}))
    ]


@pytest.mark.parametrize("strategy", strategies.STRATEGIES)
def test_template_readme_has_the_usual_sections(strategy: str) -> None:
    readme = (TEMPLATES / strategy / "README.md").read_text("utf-8")
    module = module_name(strategy)
    for expected in (
        f"# {strategy}",
        "## Environment Setup",
        "## Usage",
        "langchain app new my-app --package",
        f"#subdirectory=templates/{strategy}",
        "langchain app add",
        f"from {module}.chain import chain as {module}_chain",
        f'add_routes(app, {module}_chain, path="/{strategy}")',
        "LANGSMITH_TRACING=true",
        "LANGSMITH_API_KEY=",
        "LANGSMITH_PROJECT=",
        "langchain serve",
        f'RemoteRunnable("http://localhost:8000/{strategy}")',
        f'RemoteRunnable("http://localhost:8000/{strategy}/sources")',
        f"from {module}.chain import sources_chain as {module}_sources_chain",
        f'add_routes(app, {module}_sources_chain, path="/{strategy}/sources")',
        "limit_requests(app)",
        "http://127.0.0.1:8000/playground",
        f"http://127.0.0.1:8000/{strategy}/playground",
        serving.INDEX_ENV,
        serving.CHROMA_URL_ENV,
        serving.CHROMA_COLLECTION_ENV,
        serving.VECTOR_STORE_ENV,
        serving.CACHE_DIR_ENV,
    ):
        assert expected in readme, expected


@pytest.mark.parametrize("strategy", strategies.STRATEGIES)
def test_template_readme_commands_have_no_placeholder_and_split_before_storing(
    strategy: str,
) -> None:
    """A reader ran into ``<owner>`` in the install line, ``langchain serve`` failing with
    ModuleNotFoundError (the template was never installed), and a Chroma recipe storing whole
    files unsplit (documents of 8,000 characters against MiniLM's 256-token window)."""
    readme = (TEMPLATES / strategy / "README.md").read_text("utf-8")
    commands = "\n".join(re.findall(r"```shell\n(.*?)```", readme, re.DOTALL))
    assert "<owner>" not in commands and "github.com" not in commands
    assert "pip install -e .\nlangchain serve" in commands
    recipe = next(line for line in commands.splitlines() if "build_chroma(" in line)
    assert "build_chroma(ingest.split_documents(ingest.load(" in recipe


@pytest.mark.parametrize("strategy", strategies.STRATEGIES)
def test_template_readme_asks_questions_the_sample_answers(strategy: str) -> None:
    """Every question in a README has a relevant abstract in the sample, found by BM25 alone."""
    from rag_fusion_chain import ingest
    from rag_fusion_chain.retrievers.bm25 import BM25Retriever

    readme = (TEMPLATES / strategy / "README.md").read_text("utf-8")
    asked = set(re.findall(r'\{"question": "([^"]+)"\}', readme))
    assert asked and asked <= set(data.SAMPLE_QUESTIONS), asked - set(data.SAMPLE_QUESTIONS)
    bm25 = BM25Retriever.from_documents(ingest.load([data.sample_corpus_path()]), k=5)
    claims = {query["_id"]: query["relevant"] for query in data.sample_queries()}
    for question in asked:
        relevant = set(claims[data.SAMPLE_QUESTIONS[question]])
        found = {document.metadata["doc_id"] for document in bm25.invoke(question)}
        assert relevant & found, (question, relevant, found)


# ============================================================================================
# Packaging: a fresh virtual environment, pip's resolver, no kit
# ============================================================================================


def isolated_environment() -> dict[str, str]:
    """This process's environment without what would put the kit on a fresh venv's path."""
    return {name: value for name, value in os.environ.items() if not name.startswith("PYTHON")}


def pip(venv: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """``pip`` of ``venv``; skips the test when the package registry cannot be reached."""
    completed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", *arguments],
        env=isolated_environment(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    output = completed.stdout + completed.stderr
    if completed.returncode and re.search(
        r"NewConnectionError|Network is unreachable|timed out", output
    ):
        pytest.skip(f"the package registry is not reachable: {output[-300:]}")
    assert completed.returncode == 0, output
    return completed


@pytest.mark.timeout(400)
def test_template_without_the_kit_stops_with_one_line(tmp_path: Path) -> None:
    """In a fresh venv (no system packages) pip resolves a template; importing it names the fix.

    The kit is not published, so the templates do not require it by name (pip would stop at "No
    matching distribution"): pip's resolver accepts the template's requirements as they are, and
    the template, imported without the kit, stops at once with one line saying how to install it.
    """
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    report = tmp_path / "report.json"
    pip(
        venv,
        "install",
        "--quiet",
        "--dry-run",
        "--report",
        str(report),
        str(TEMPLATES / "rag-fusion"),
    )
    resolved = {item["metadata"]["name"] for item in json.loads(report.read_text())["install"]}
    assert {"rag-fusion", "langchain-core"} <= resolved and "rag-fusion-chain" not in resolved
    pip(
        venv,
        "install",
        "--quiet",
        "--no-deps",
        *(str(TEMPLATES / name) for name in strategies.STRATEGIES),
    )

    for strategy in strategies.STRATEGIES:
        started = time.monotonic()
        imported = subprocess.run(
            [str(venv / "bin" / "python"), "-c", f"import {module_name(strategy)}"],
            env=isolated_environment(),
            cwd=tmp_path,  # not the repository, whose rag_fusion_chain `-c` would find
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert imported.returncode == 1 and time.monotonic() - started < 30
        last = imported.stderr.strip().splitlines()[-1]
        assert last.startswith(
            f"ImportError: the {strategy} template needs the rag-fusion-chain kit"
        )
        assert 'pip install "rag-fusion-chain[faiss,bm25,hf,openai,serve] @ git+https://' in last


# ============================================================================================
# rag_fusion_chain.serving
# ============================================================================================


def test_settings_default_to_faiss_and_reject_unknown_stores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(serving.VECTOR_STORE_ENV, raising=False)
    assert serving.vector_store_kind() == "faiss"
    monkeypatch.setenv(serving.VECTOR_STORE_ENV, " Chroma ")
    assert serving.vector_store_kind() == "chroma"
    monkeypatch.setenv(serving.VECTOR_STORE_ENV, "pinecone")
    with pytest.raises(ValueError, match=serving.VECTOR_STORE_ENV):
        serving.vector_store_kind()


def test_build_chain_rejects_an_unknown_strategy() -> None:
    with pytest.raises(ValueError, match="strategy must be one of"):
        serving.build_chain("rag-fusion-2")


def test_building_the_chain_indexes_nothing(serving_env: StubOpenAI) -> None:
    serving.build_chain("rag-fusion")
    assert serving_env.counts["embeddings"] == 0
    assert not (Path(os.environ[serving.CACHE_DIR_ENV])).exists()


def test_faiss_index_is_built_once_then_loaded_from_the_cache(serving_env: StubOpenAI) -> None:
    chain = serving.build_chain("multi-query")
    answer = chain.invoke({"question": data.SAMPLE_QUESTION})
    assert answer.startswith(offline.OFFLINE_LABEL)
    built = embedded_texts(serving_env)
    assert built >= SAMPLE_DOCUMENTS
    (index,) = Path(os.environ[serving.CACHE_DIR_ENV]).iterdir()
    assert index.name.startswith("faiss-") and (index / INDEX_FILE).is_file()
    stores = stores_directory(index, read_settings(index))
    assert (stores / "faiss" / "manifest.json").is_file() and (stores / "bm25").is_dir()

    serving.clear_cache()
    again = serving.build_chain("multi-query").invoke({"question": data.SAMPLE_QUESTION})
    assert again == answer
    assert embedded_texts(serving_env) - built < SAMPLE_DOCUMENTS, "the corpus was embedded again"


def test_chroma_is_chosen_by_the_setting_and_reused(
    serving_env: StubOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(serving.VECTOR_STORE_ENV, "chroma")
    first = serving.build_chain("hyde").invoke({"question": data.SAMPLE_QUESTION})
    built = embedded_texts(serving_env)
    assert built >= SAMPLE_DOCUMENTS
    (index,) = Path(os.environ[serving.CACHE_DIR_ENV]).iterdir()
    assert index.name.startswith("chroma-")
    assert read_settings(index)["store"] == "chroma"

    serving.clear_cache()
    assert serving.build_chain("hyde").invoke({"question": data.SAMPLE_QUESTION}) == first
    assert embedded_texts(serving_env) - built < SAMPLE_DOCUMENTS, "the corpus was embedded again"


async def test_the_deferred_chain_adds_no_run_and_streams(
    serving_env: StubOpenAI,
    langsmith_recorder: LangSmithRecorder,
    shared_index_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(serving.CACHE_DIR_ENV, str(shared_index_cache))
    client = Client(api_url=langsmith_recorder.url, api_key="fake-langsmith-key")
    tracer = LangChainTracer(client=client, project_name="serving")
    chain = serving.build_chain("step-back")
    config: Any = {"callbacks": [tracer]}

    chunks = [chunk async for chunk in chain.astream({"question": data.SAMPLE_QUESTION}, config)]
    answer = await chain.ainvoke({"question": data.SAMPLE_QUESTION}, config)
    tracer.wait_for_futures()
    client.flush()

    assert "".join(chunks) == answer
    served_roots = roots(langsmith_recorder.runs)
    assert [root["name"] for root in served_roots] == ["step-back", "step-back"]
    assert all("step-back" in root["tags"] for root in served_roots)


def roots(runs: dict[str, Run]) -> list[Run]:
    return [run for run in runs.values() if not run.get("parent_run_id")]


def descendant_names(runs: dict[str, Run], root: Run) -> set[str]:
    names, frontier = set(), [root["id"]]
    while frontier:
        parent = frontier.pop()
        for run in runs.values():
            if run.get("parent_run_id") == parent:
                names.add(run["name"])
                frontier.append(run["id"])
    return names


# ============================================================================================
# End to end: langchain app new / add from git, langchain serve, RemoteRunnable
# ============================================================================================


def langchain_cli(arguments: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Run ``langchain <arguments>`` (telemetry off); its output, or a failure showing it."""
    completed = subprocess.run(
        [sys.executable, "-c", CLI_WITHOUT_TELEMETRY, *arguments],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, f"langchain {' '.join(arguments)} failed:\n{output}"
    return completed.stdout


def git_repository_with_templates(directory: Path) -> Path:
    """A git repository (branch ``main``) holding a copy of ``templates/``."""
    shutil.copytree(
        TEMPLATES, directory / "templates", ignore=shutil.ignore_patterns("__pycache__")
    )
    git = ["git", "-c", "user.name=tests", "-c", "user.email=tests@example.invalid"]
    for command in (
        ["init", "-q", "-b", "main"],
        ["add", "templates"],
        ["-c", "commit.gpgsign=false", "commit", "-q", "-m", "templates"],
    ):
        subprocess.run([*git, *command], cwd=directory, check=True, capture_output=True)
    return directory


def wire_routes(app_directory: Path, add_output: str) -> None:
    """Put the import and ``add_routes`` lines that ``langchain app add`` printed in server.py."""
    lines = add_output.splitlines()
    imports = [line for line in lines if line.startswith("from ") and " import chain as " in line]
    routes = [line for line in lines if line.startswith("add_routes(app, ")]
    assert len(imports) == 1 and len(routes) == 1, add_output
    server = app_directory / "app" / "server.py"
    source = server.read_text("utf-8")
    assert "add_routes(app, NotImplemented)" in source
    server.write_text(
        f"{imports[0]}\n" + source.replace("add_routes(app, NotImplemented)", routes[0]), "utf-8"
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def serving_app(app_directory: Path, env: dict[str, str], log: Path) -> Iterator[str]:
    """``langchain serve`` in ``app_directory`` until the block ends; yields the base URL.

    The server (uvicorn's reloader and its worker) runs in a session of its own, stopped as a
    group with SIGTERM, then SIGKILL if it lingers.
    """
    port = free_port()
    command = [str(Path(sys.executable).parent / "langchain"), "serve", "--host", "127.0.0.1"]
    with log.open("wb") as output:
        server = subprocess.Popen(
            [*command, "--port", str(port)],
            cwd=app_directory,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{url}/docs", server, log)
        yield url
    finally:
        stop_process_group(server)


def wait_until_up(
    url: str, server: subprocess.Popen[bytes], log: Path, timeout: float = 90
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"langchain serve exited ({server.returncode}):\n{log.read_text()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    pytest.fail(f"langchain serve did not answer within {timeout} s:\n{log.read_text()}")


def stop_process_group(process: subprocess.Popen[bytes]) -> None:
    for stop_signal, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, stop_signal)
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def app_environment(
    tmp_path: Path, stub: StubOpenAI, recorder: LangSmithRecorder, index_cache: Path
) -> dict[str, str]:
    """The environment of the CLI and the served app: offline, no key, traced to the recorder."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in MODEL_ENVIRONMENT_VARIABLES and name not in LANGSMITH_VARIABLES
    }
    env.update(
        XDG_CONFIG_HOME=str(tmp_path / "config"),  # the CLI clones templates under it
        PYTHONDONTWRITEBYTECODE="1",
        OPENAI_BASE_URL=stub.base_url,
        RAG_FUSION_CHAT_MODEL="offline",
        RAG_FUSION_EMBEDDING=STUB_EMBEDDING,
        LANGSMITH_TRACING="true",
        LANGSMITH_ENDPOINT=recorder.url,
        LANGSMITH_API_KEY="fake-langsmith-key",
        LANGSMITH_PROJECT="templates",
        **{serving.CACHE_DIR_ENV: str(index_cache)},
    )
    return env


def two_finished_traces(runs: dict[str, Run]) -> bool:
    return len([root for root in roots(runs) if root.get("end_time")]) == 2


def test_app_from_git_serves_the_template_through_remote_runnable(
    tmp_path: Path,
    clean_openai_stub: StubOpenAI,
    langsmith_recorder: LangSmithRecorder,
    shared_index_cache: Path,
) -> None:
    from langserve import RemoteRunnable

    repository = git_repository_with_templates(tmp_path / "repository")
    env = app_environment(tmp_path, clean_openai_stub, langsmith_recorder, shared_index_cache)
    langchain_cli(["app", "new", "my-app", "--non-interactive"], tmp_path, env)
    app_directory = tmp_path / "my-app"
    source = f"git+file://{repository}@main#subdirectory=templates/rag-fusion"
    added = langchain_cli(["app", "add", "--no-pip", source], app_directory, env)
    wire_routes(app_directory, added)
    assert (app_directory / "packages" / "rag-fusion" / "rag_fusion" / "chain.py").is_file()
    env["PYTHONPATH"] = str(app_directory / "packages" / "rag-fusion")

    with serving_app(app_directory, env, tmp_path / "serve.log") as url:
        remote = RemoteRunnable(f"{url}/rag-fusion", timeout=180)
        answer = remote.invoke({"question": data.SAMPLE_QUESTION})
        chunks = list(remote.stream({"question": data.SAMPLE_QUESTION}))
        traced = langsmith_recorder.wait_for(two_finished_traces)  # sent while the app runs

    assert answer.startswith(offline.OFFLINE_LABEL)
    assert re.search(r" \[\d+\]$", answer), "the answer cites no passage"
    assert "".join(chunks) == answer
    assert traced, langsmith_recorder.runs
    runs = langsmith_recorder.runs
    for root in roots(runs):
        assert root["name"] == "/rag-fusion"  # LangServe names the run after the route
        assert "rag-fusion" in root["tags"]
        metadata = root["extra"]["metadata"]
        assert metadata["strategy"] == "rag-fusion"
        assert {"n", "k", "top_n"} <= set(metadata)
        assert descendant_names(runs, root) >= SERVED_STEPS
    assert all(
        request.headers.get("x-api-key") == "fake-langsmith-key"
        for request in langsmith_recorder.requests
    )
