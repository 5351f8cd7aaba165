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

Every README command (about 3 minutes, marked slow): one README run block by block from a fresh
copy of the repository, in a venv over this environment's packages, in a loopback-only network
namespace where the system allows one (there the CLI's event fails at once).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
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
    question, text = schema["oneOf"]  # one form per input: its errors alone
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
        "`/playground`",
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
def test_template_readme_serves_alone_with_limits_and_marks_langchain_serve_unprotected(
    strategy: str,
) -> None:
    """A walk-through served a template alone with ``langchain serve``, which has none of the
    request limits (see the next test): the README offers ``rag-fusion serve`` for that, and the
    paragraph before the ``langchain serve`` of the template's own folder says it is unprotected."""
    readme = (TEMPLATES / strategy / "README.md").read_text("utf-8")
    paragraphs = readme.strip().split("\n\n")
    protected = paragraphs.index(f"```shell\nrag-fusion serve --strategy {strategy}\n```")
    alone_block = f"```shell\ncd rag-fusion-chain/templates/{strategy}\npip install -e .\n"
    alone = paragraphs.index(f"{alone_block}langchain serve\n```")
    assert protected < alone
    warning = paragraphs[alone - 1]
    assert warning.startswith("**Unprotected, for local development only:**")
    assert "none of the request limits" in warning
    blocks = re.findall(r"```shell\n(.*?)```", readme, re.DOTALL)
    served = [block for block in blocks if block.endswith("langchain serve\n")]
    alone_served = alone_block.removeprefix("```shell\n") + "langchain serve\n"
    assert served == ["cd my-app\nlangchain serve\n", alone_served]  # my-app: limit_requests


def test_langchain_serve_gives_a_template_alone_none_of_the_request_limits(
    template_imports: pytest.MonkeyPatch,
) -> None:
    """What the README warns of: the app ``langchain serve`` builds in a template's folder answers
    a foreign Host or Origin and a ``text/plain`` body (a cross-site simple POST), which the same
    app under ``limit_requests`` refuses. langchain-cli builds it itself, with no hook for
    middleware; should a release add one, this test fails and the template can use it."""
    from fastapi.testclient import TestClient
    from langchain_cli.dev_scripts import create_demo_server

    from rag_fusion_chain.serving_limits import limit_requests

    template_imports.chdir(TEMPLATES / "rag-fusion")
    template_imports.syspath_prepend(str(TEMPLATES / "rag-fusion"))
    plain = {"Content-Type": "text/plain"}
    empty_question = '{"input": {"question": ""}}'  # refused before the chain runs
    expected = {"langchain serve": (200, 200, 422), "limit_requests": (400, 403, 415)}
    for name, app in (
        ("langchain serve", create_demo_server()),
        ("limit_requests", limit_requests(create_demo_server())),
    ):
        with TestClient(app, base_url="http://127.0.0.1:8000") as client:
            statuses = (
                client.get("/input_schema", headers={"Host": "attacker.example"}).status_code,
                client.get(
                    "/input_schema", headers={"Origin": "http://attacker.example"}
                ).status_code,
                client.post("/invoke", content=empty_question, headers=plain).status_code,
            )
        assert statuses == expected[name], name


def readme_kit_extras(strategy: str) -> str:
    """The extras the template's README installs the kit with first (``faiss,bm25,...``)."""
    readme = (TEMPLATES / strategy / "README.md").read_text("utf-8")
    installed = re.search(r'pip install -e "\$KIT\[([a-z0-9,]+)\]"', readme)
    assert installed is not None, "the README installs no kit"
    return installed[1]


@pytest.mark.parametrize("strategy", strategies.STRATEGIES)
def test_template_without_the_kit_names_the_extras_its_readme_installs(
    strategy: str, tmp_path: Path
) -> None:
    """The one line a template imported without the kit prints installs what its README does
    (``ingest`` and ``cli`` too, which ``rag-fusion index`` needs): a walk-through found fewer.
    ``python -S``: no site-packages, so no kit (the template imports the kit before anything)."""
    imported = subprocess.run(
        [sys.executable, "-S", "-c", f"import {module_name(strategy)}"],
        env={"PYTHONPATH": str(TEMPLATES / strategy)},
        cwd=tmp_path,  # not the repository, whose rag_fusion_chain `-c` would find
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    last = imported.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ImportError: the {strategy} template needs the rag-fusion-chain kit")
    extras = readme_kit_extras(strategy)
    assert last.endswith(f'pip install -e "rag-fusion-chain[{extras}]"')
    assert {"ingest", "cli"} <= set(extras.split(","))


README_QUESTIONS = {
    data.SAMPLE_QUESTION: "179",
    "Does a deficiency of vitamin B12 raise blood levels of homocysteine?": "36",
}
"""The questions the READMEs ask, each with the SciFact claim (in the sample's queries) it asks."""


@pytest.mark.parametrize("strategy", strategies.STRATEGIES)
def test_template_readme_asks_questions_the_sample_answers(strategy: str) -> None:
    """Every question in a README has a relevant abstract in the sample, found by BM25 alone."""
    from rag_fusion_chain import ingest
    from rag_fusion_chain.retrievers.bm25 import BM25Retriever

    readme = (TEMPLATES / strategy / "README.md").read_text("utf-8")
    asked = set(re.findall(r'\{"question": "([^"]+)"\}', readme))
    assert asked and asked <= set(README_QUESTIONS), asked - set(README_QUESTIONS)
    bm25 = BM25Retriever.from_documents(ingest.load([data.sample_corpus_path()]), k=5)
    claims = {query["_id"]: query["relevant"] for query in data.sample_queries()}
    for question in asked:
        relevant = set(claims[README_QUESTIONS[question]])
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
        assert f'pip install -e "rag-fusion-chain[{readme_kit_extras(strategy)}]"' in last
        assert "<" not in last, "a placeholder nobody can run"


# ============================================================================================
# rag_fusion_chain.serving
# ============================================================================================


def test_an_unknown_vector_store_is_refused_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(serving.VECTOR_STORE_ENV, "pinecone")
    with pytest.raises(ValueError, match=serving.VECTOR_STORE_ENV):
        serving.sample_index("minilm")  # refused before anything loads


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

    serving.open_source.cache_clear()
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

    serving.open_source.cache_clear()
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


# ============================================================================================
# Every README command, run as written
# ============================================================================================

FULL_RUN = "rag-fusion"
"""The template whose README runs block by block; the others differ only in names (tested)."""
PER_TEMPLATE = ("langchain app add", "add_routes(", "RemoteRunnable(")
"""Blocks also run from every other template's README: add it to the same app, ask it."""
KIT_NAMES = {
    "rag-fusion-chain": "KIT",
    "rag_fusion_chain.": "KIT.",
    "from rag_fusion_chain ": "from KIT ",
    "`rag_fusion_chain`": "`KIT`",
    "rag-fusion index": "KIT index",
    "rag-fusion serve": "KIT serve",
}
"""The kit's own names in a README, which stay in every template's."""
NEEDS_A_KEY = "LANGSMITH_API_KEY=<"
"""The LangSmith block is skipped: it needs a real LangSmith key (the README says so)."""
NOTES = {
    "kelp.md": "# Kelp\n\nKelp forests grow fastest in cold, nutrient-rich water along rocky coasts.\n",
    "basalt.txt": "Basalt columns form when thick lava flows cool and contract slowly.\n",
}
"""``~/notes``, the user's own documents of the README's index and Chroma commands."""
EDIT_SERVER = """
import sys
from pathlib import Path
server, block = Path(sys.argv[1]), Path(sys.argv[2]).read_text()
source = server.read_text()
marker = "add_routes(app, NotImplemented)" if "add_routes(app, NotImplemented)" in source else 'if __name__ == "__main__":'
server.write_text(source.replace(marker, block + ("" if "NotImplemented" in marker else marker)))
"""
"""Puts a README's ``add_routes`` block in ``app/server.py`` where the README says (a user's edit)."""
SESSION_FUNCTIONS = """
set -euo pipefail
WORK="$PWD"
SERVERS=()
start_server() {  # a block that ends in a server, in a session of its own, until its port answers
  setsid bash -e "$1" > "$1.log" 2>&1 &
  SERVERS+=($!)
  local deadline=$((SECONDS + 240))
  while ((SECONDS < deadline)); do
    if curl -s -o /dev/null --max-time 5 "http://127.0.0.1:$2/"; then return 0; fi
    if ! kill -0 "$!" 2>/dev/null; then break; fi
    sleep 0.5
  done
  cat "$1.log"; return 1
}
stop_servers() {  # SIGTERM to each server's process group, SIGKILL after 10 s
  for pid in "${SERVERS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for pid in "${SERVERS[@]}"; do
    for attempt in $(seq 40); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
  SERVERS=()
}
trap stop_servers EXIT
trap 'exit 143' TERM INT
"""


def readme_blocks(strategy: str) -> list[tuple[str, str]]:
    """The README's ``(language, code)`` blocks, in order."""
    readme = (TEMPLATES / strategy / "README.md").read_text("utf-8")
    return re.findall(r"```(shell|python)\n(.*?)```", readme, re.DOTALL)


@pytest.mark.parametrize("strategy", strategies.STRATEGIES)
def test_templates_differ_only_in_names_and_first_paragraph(strategy: str) -> None:
    """So running one README fully and the others' per-template blocks runs every command, and
    a new strategy's template is a copy with its names (its package name names the strategy)."""

    def normalised(name: str) -> str:
        lines = (TEMPLATES / name / "README.md").read_text("utf-8").splitlines()
        del lines[2]  # the strategy in one paragraph
        text = "\n".join(lines)
        for kit, stand_in in KIT_NAMES.items():
            text = text.replace(kit, stand_in)
        return text.replace(name, "NAME").replace(module_name(name), "NAME")

    assert normalised(strategy) == normalised(FULL_RUN)
    for source in ("__init__.py", "chain.py"):
        package = TEMPLATES / strategy / module_name(strategy) / source
        assert package.read_text() == (TEMPLATES / FULL_RUN / "rag_fusion" / source).read_text()


def session_script(blocks_directory: Path) -> str:
    """The README blocks as one shell session started in the folder holding the clone.

    Each block starts there (blocks ``cd`` where they need to); a block ending in a server
    (``chroma run``, ``langchain serve``, ``rag-fusion serve``) runs in the background until its
    port answers, after stopping the servers before it (they share ports); blocks that export an
    index source run in a subshell (the README: "skip these two"); ``add_routes`` blocks are put
    in the app's ``server.py``; other Python blocks run with ``python``. Each block's output
    follows a ``::block <file name>`` line.
    """
    lines = [SESSION_FUNCTIONS]
    (blocks_directory / "edit_server.py").write_text(EDIT_SERVER, "utf-8")
    every = {strategy: readme_blocks(strategy) for strategy in strategies.STRATEGIES}
    for number, (language, code) in enumerate(every[FULL_RUN]):
        repeated = any(marker in code for marker in PER_TEMPLATE)
        for strategy in strategies.STRATEGIES if repeated else [FULL_RUN]:
            language, code = every[strategy][number]
            block = (
                blocks_directory / f"{strategy}-{number}.{'sh' if language == 'shell' else 'py'}"
            )
            block.write_text(code, "utf-8")
            lines += ['cd "$WORK"', f"printf '\\n::block {block.stem}\\n'"]
            if NEEDS_A_KEY in code:
                lines.append("echo 'skipped: needs a real LangSmith key'")
            elif language == "python" and "add_routes(" in code:
                lines.append(
                    f'python "{blocks_directory}/edit_server.py" my-app/app/server.py "{block}"'
                )
            elif language == "python":
                lines.append(f'python "{block}"')
            elif re.search(
                r"^(chroma run|langchain serve|rag-fusion serve)", code.strip().splitlines()[-1]
            ):
                port = re.search(r"--port (\d+)", code)
                lines += ["stop_servers", f'start_server "{block}" {port[1] if port else 8000}']
            elif "export RAG_FUSION_" in code:
                lines.append(f'( . "{block}" )')
            else:
                lines.append(f'. "{block}"')
    lines += ['cd "$WORK"', "stop_servers", "printf '\\n::done\\n'"]
    return "\n".join(lines) + "\n"


def reusing_venv(directory: Path) -> Path:
    """A venv over this environment's packages (a ``.pth`` line), without the kit itself.

    Its console scripts are this environment's, run by the new venv's python, so ``pip install
    -e`` installs the clone there and the CLI, ``langchain`` and ``chroma`` import the clone.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True)
    (site_packages,) = directory.glob("lib/python*/site-packages")
    purelib = Path(sysconfig.get_paths()["purelib"])
    (site_packages / "reused_packages.pth").write_text(f"{purelib}\n", "utf-8")
    python, scripts = str(directory / "bin" / "python"), Path(sys.executable).parent
    for script in scripts.iterdir():
        target = directory / "bin" / script.name
        with contextlib.suppress(UnicodeDecodeError, IsADirectoryError):
            first, _, rest = script.read_text("utf-8").partition("\n")
            ours = first.startswith("#!") and Path(first[2:].strip()).parent == scripts
            if ours and not target.exists():
                target.write_text(f"#!{python}\n{rest}", "utf-8")
                target.chmod(0o755)
    return directory


def fresh_clone(destination: Path) -> Path:
    """The repository's files as they are now (committed or not), as a one-commit clone."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPOSITORY,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        if (REPOSITORY / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPOSITORY / name, destination / name)
    git = ["git", "-c", "user.name=tests", "-c", "user.email=tests@example.invalid"]
    for command in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "clone"]):
        subprocess.run([*git, "-c", "commit.gpgsign=false", *command], cwd=destination, check=True)
    return destination


def loopback_only() -> list[str]:
    """A private network (loopback only) and process namespace, when the system allows one.

    Nothing but loopback is reachable, the README's fixed ports meet no other process, and
    every server ends with the namespace. Without it the test runs as is (ports 8000, 8001).
    """
    command = ["unshare", "-rnpf", "--mount-proc", "bash", "-c", "ip link set lo up"]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        if subprocess.run(command, capture_output=True, timeout=30).returncode == 0:
            return [*command[:-1], 'ip link set lo up && exec bash "$0"']
    return ["bash"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_template_readme_command_runs_as_written(tmp_path: Path) -> None:
    """From a fresh clone: the kit installed from it, notes indexed and put in a Chroma server,
    an app made with ``langchain app new`` and every template added with ``langchain app add``
    from ``git+file://``, served with ``langchain serve`` and asked over 127.0.0.1 by each
    README's ``RemoteRunnable`` code, then the strategy served alone by ``rag-fusion serve`` and
    asked with ``curl``, and the template alone started with ``langchain serve``.

    Offline: pip uses no index and no build isolation (the packages are this environment's);
    MiniLM's converted model is the user's cache (a symbolic link), HOME is empty otherwise.
    """
    if shutil.which("git") is None or not (REPOSITORY / ".git").exists():
        pytest.skip("needs git and a git checkout of the kit")
    if importlib.util.find_spec("poetry.core") is None:
        pytest.skip("the templates' build backend, poetry-core, is not installed (dev extra)")
    from rag_fusion_chain.encoders import DEFAULT_EXPORT_DIR

    work, home, blocks = tmp_path / "work", tmp_path / "home", tmp_path / "blocks"
    for directory in (work, home / "notes", home / ".cache" / "rag-fusion-chain", blocks):
        directory.mkdir(parents=True)
    for name, text in NOTES.items():
        (home / "notes" / name).write_text(text, "utf-8")
    Path(DEFAULT_EXPORT_DIR).mkdir(parents=True, exist_ok=True)
    (home / ".cache" / "rag-fusion-chain" / "openvino").symlink_to(DEFAULT_EXPORT_DIR)
    fresh_clone(work / "rag-fusion-chain")
    venv = reusing_venv(tmp_path / "venv")
    (blocks / "session.sh").write_text(session_script(blocks), "utf-8")
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV", "XDG_", "LANGSMITH", "LANGCHAIN"))
        and name not in MODEL_ENVIRONMENT_VARIABLES
        and not name.startswith("RAG_FUSION_")
    }
    env.update(
        HOME=str(home),
        PATH=f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        PIP_NO_INDEX="1",
        PIP_NO_BUILD_ISOLATION="0",  # pip's spelling of --no-build-isolation
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    session = subprocess.Popen(
        [*loopback_only(), str(blocks / "session.sh")],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        output, _ = session.communicate(timeout=840)
    finally:
        stop_process_group(session)
    text = output.decode("utf-8", "replace")
    (blocks / "session.log").write_text(text, "utf-8")  # kept with the test's temporary folder
    assert session.returncode == 0 and text.rstrip().endswith("::done"), text[-6000:]

    outputs = dict(re.findall(r"^::block (\S+)\n(.*?)(?=^::block |^::done)", text, re.S | re.M))
    assert (home / "indexes" / "notes" / INDEX_FILE).is_file()
    asked = [path.stem for path in blocks.glob("*.py") if "RemoteRunnable(" in path.read_text()]
    assert sorted(name.rsplit("-", 1)[0] for name in asked) == sorted(strategies.STRATEGIES)
    for name in asked:  # two answers and a stream, then the queries and documents
        assert outputs[name].count(offline.OFFLINE_LABEL) == 3, (name, outputs[name])
        assert outputs[name].strip().splitlines()[-1].startswith("["), (name, outputs[name])
    (curl,) = [path.stem for path in blocks.glob("*.sh") if path.read_text().startswith("curl")]
    assert json.loads(outputs[curl])["output"].startswith(offline.OFFLINE_LABEL), outputs[curl]
    assert "skipped: needs a real LangSmith key" in text
