"""The cookbook notebooks run top to bottom: offline (the CI default) and against a chat model.

Each notebook is executed with nbclient in a fresh kernel started from a kernelspec written to a
temporary directory that points at this interpreter (so the kernel sees the same virtualenv,
whatever kernels the machine has registered), in a temporary working directory, with a timeout
per cell. Any cell error fails the test. The committed notebooks must carry their outputs, so
readers see results on GitHub without running anything.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402
from jupyter_client.manager import KernelManager  # noqa: E402

from rag_fusion_chain import encoders  # noqa: E402
from tests.stub_openai import StubOpenAI  # noqa: E402

COOKBOOK = Path(__file__).resolve().parent.parent / "cookbook"
NOTEBOOKS = sorted(COOKBOOK.glob("*.ipynb"))
KERNEL_NAME = "rag-fusion-cookbook"
KIT = "rag-fusion-chain"
"""The kit's folder in the cache and config homes."""
CELL_TIMEOUT = 300
"""Seconds one cell may take: generous, as loading MiniLM on a busy CI runner can be slow."""
TRACING_VARIABLES = ("LANGCHAIN_TRACING_V2", "LANGSMITH_TRACING", "LANGCHAIN_API_KEY")
OFFLINE_VARIABLES = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory: pytest.TempPathFactory) -> KernelSpecManager:
    """A kernelspec manager that knows one kernel: ipykernel on this very interpreter."""
    kernels = tmp_path_factory.mktemp("jupyter") / "kernels"
    spec = kernels / KERNEL_NAME
    spec.mkdir(parents=True)
    kernel = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python ({sys.executable})",
        "language": "python",
    }
    (spec / "kernel.json").write_text(json.dumps(kernel), encoding="utf-8")
    return KernelSpecManager(kernel_dirs=[str(kernels)])


@pytest.fixture
def kernel_env(clean_model_env: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[pytest.MonkeyPatch]:
    """The kernel inherits this process's environment: no model keys, no tracing, no downloads,
    and an empty HOME (IPython's profile in a temporary folder) whose kit cache reuses the one-time
    OpenVINO conversion; :func:`files_in_home` tells what the notebook left there."""
    clean_model_env.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    encoders.DEFAULT_EXPORT_DIR.mkdir(parents=True, exist_ok=True)
    kit_cache = tmp_path / "home" / ".cache" / KIT
    kit_cache.mkdir(parents=True)
    (kit_cache / encoders.DEFAULT_EXPORT_DIR.name).symlink_to(encoders.DEFAULT_EXPORT_DIR)
    clean_model_env.setenv("HOME", str(tmp_path / "home"))
    clean_model_env.delenv("XDG_CACHE_HOME", raising=False)
    clean_model_env.delenv("XDG_CONFIG_HOME", raising=False)
    for name in TRACING_VARIABLES:
        clean_model_env.delenv(name, raising=False)
    for name, value in OFFLINE_VARIABLES.items():
        clean_model_env.setenv(name, value)
    yield clean_model_env


def files_in_home(home: Path) -> list[str]:
    """What a run wrote in ``home`` outside the kit's own folders (Jupyter's runtime files are the
    test harness's)."""
    own = {f".cache/{KIT}", f".config/{KIT}", ".local/share/jupyter"}
    written = [path.relative_to(home).as_posix() for path in home.rglob("*") if path.is_file()]
    return [name for name in written if not any(name.startswith(f"{folder}/") for folder in own)]


def execute(path: Path, kernel_specs: KernelSpecManager, workdir: Path) -> tuple[object, float]:
    """Run a notebook in ``workdir``; raise ``CellExecutionError`` on the first failing cell."""
    notebook = nbformat.read(path, as_version=4)
    manager = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=kernel_specs)
    client = nbclient.NotebookClient(
        notebook,
        km=manager,
        timeout=CELL_TIMEOUT,
        startup_timeout=120,
        allow_errors=False,
        resources={"metadata": {"path": str(workdir)}},
    )
    started = time.perf_counter()
    client.execute()
    return notebook, time.perf_counter() - started


def error_outputs(notebook: object) -> list[str]:
    return [
        f"{output.get('ename')}: {output.get('evalue')}"
        for cell in notebook.cells  # type: ignore[attr-defined]
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]


def test_there_are_four_notebooks_and_the_readme_lists_each() -> None:
    assert [path.name[:3] for path in NOTEBOOKS] == ["01_", "02_", "03_", "04_"]
    readme = (COOKBOOK / "README.md").read_text(encoding="utf-8")
    for path in NOTEBOOKS:
        assert path.name in readme, f"cookbook/README.md does not mention {path.name}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_committed_notebook_shows_the_outputs_of_a_clean_run(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    counts = [cell.get("execution_count") for cell in code_cells]
    assert counts == list(range(1, len(code_cells) + 1)), "run top to bottom once, then save"
    assert not error_outputs(notebook)
    assert any(cell.get("outputs") for cell in code_cells)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_runs_offline(
    path: Path, kernel_specs: KernelSpecManager, kernel_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    notebook, seconds = execute(path, kernel_specs, tmp_path)
    assert not error_outputs(notebook)
    assert files_in_home(tmp_path / "home") == []  # no telemetry ids, no library caches
    print(f"{path.name}: {seconds:.1f} s offline")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_runs_with_a_configured_chat_model(
    path: Path,
    kernel_specs: KernelSpecManager,
    kernel_env: pytest.MonkeyPatch,
    openai_env: StubOpenAI,
    tmp_path: Path,
) -> None:
    """The branches taken when OPENAI_API_KEY is set, against the stub OpenAI-compatible server."""
    notebook, seconds = execute(path, kernel_specs, tmp_path)
    assert not error_outputs(notebook)
    assert openai_env.counts["chat"] > 0, "the notebook never called the configured chat model"
    print(f"{path.name}: {seconds:.1f} s with the stub chat model")
