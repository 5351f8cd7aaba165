"""Smoke tests: each benchmark script's ``main`` runs on a tiny input (no timing assertions)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from rag_fusion_chain.data import sample_corpus_path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_script(name: str) -> ModuleType:
    """Import ``benchmarks/<name>.py`` (not a package) as a module."""
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_embedding_calls_counts_requests_per_question(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script("bench_embedding_calls")
    rows = bench.main(["--n", "1", "3", "--questions", "2", "--docs", "20"])
    assert len(rows) == 2 * 2 * 2  # N values x retrievers x compositions
    for row in rows:
        queries = row["n"] + 1
        assert row["queries"] == queries
        assert row["texts"] == queries
        styles = [row["invoke"], row["ainvoke"], row["stream"]]
        if row["retriever"] == "plain as_retriever()":
            assert styles == [queries] * 3  # one embed_query per query
        elif row["composition"] == "chains.rag_fusion_chain":
            assert all(1 <= requests <= queries for requests in styles)  # micro-batched stream
        else:
            assert styles == [1] * 3  # retriever.map(): one batch
    assert "embedding requests / question" in capsys.readouterr().out


def test_indexing_throughput_runs_on_a_few_chunks(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script("bench_indexing")
    figures = bench.main(["--corpus", str(sample_corpus_path()), "--chunks", "6", "--rounds", "1"])
    assert figures["chunks"] == 6
    assert figures["max_difference"] < 1e-4  # the kit stores the vectors raw encode gives
    assert "kit/raw wall" in capsys.readouterr().out


def test_indexing_memory_child_reports_peaks(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script("bench_indexing")
    figures = bench.main(["--memory", "--corpus", str(sample_corpus_path()), "--docs", "3"])
    assert figures["path"] == "kit"
    assert figures["documents"] == 3
    assert figures["vectors"] == figures["chunks"] >= 3
    assert figures["rss_peak_mib"] >= figures["rss_after_model_mib"] > 0
    assert "peak ru_maxrss" in capsys.readouterr().out


def test_indexing_memory_baseline_runs_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script("bench_indexing")
    arguments = ["--memory-child", "--raw", "--corpus", str(sample_corpus_path()), "--docs", "2"]
    figures = bench.main(arguments)
    assert figures["path"] == "raw"
    assert figures["vectors"] == figures["chunks"] >= 2
    assert '"path": "raw"' in capsys.readouterr().out


def test_latency_grid_runs_one_tiny_cell_per_kind(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script("bench_latency")
    arguments = ["--latency-ms", "1", "--token-ms", "0", "--retrievers", "2", "--runs", "1"]
    cells = bench.main([*arguments, "--n", "2"])
    assert [cell.kind for cell in cells] == ["plain", "serial", "vector"]
    searched = 2 + 1  # the generated queries and the question
    for cell in cells:
        per_retriever = {name: requests[0] / 2 for name, requests in cell.requests.items()}
        if cell.kind in ("plain", "serial"):  # one call per query and retriever, whatever the way
            assert per_retriever["map"] == per_retriever["chain"] == searched
        else:  # embedding requests never exceed the queries searched; .map() batches them all
            assert per_retriever["map"] == 1
            assert 1 <= per_retriever["chain"] <= searched
            assert 1 <= per_retriever["FusionRetriever"] <= searched
    assert "chain / map" in capsys.readouterr().out


def test_indexing_backends_compares_torch_and_the_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = load_script("bench_indexing")
    arguments = ["--backends", "--corpus", str(sample_corpus_path()), "--chunks", "4"]
    figures = bench.main([*arguments, "--rounds", "2"])
    assert figures["passages"] == 4 and figures["rounds"] == 2
    assert figures["min_cosine"] >= 0.999 and figures["ratio"] > 0
    assert "min cosine" in capsys.readouterr().out
