"""Tests of rag_fusion_chain.evaluate.langsmith_experiment: evaluators against ranx, local
``langsmith.evaluate`` runs on the tiny BEIR dataset, and ``rag-fusion eval --langsmith``."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from rag_fusion_chain.evaluate import (
    Indexes,
    evaluate_run,
    load_beir,
    run_setups,
    setup_by_name,
)
from rag_fusion_chain.evaluate.langsmith_experiment import (
    langsmith_configured,
    local_examples,
    retrieval_evaluator,
    run_langsmith_experiments,
)
from tests.test_evaluate import write_tiny_beir


@pytest.fixture
def tiny_beir(tmp_path: Path) -> Path:
    return write_tiny_beir(tmp_path / "tiny")


@pytest.fixture(autouse=True)
def no_langsmith_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing here may reach a real LangSmith: the developer's settings are removed."""
    for name in (
        "LANGSMITH_API_KEY",
        "LANGCHAIN_API_KEY",
        "LANGSMITH_ENDPOINT",
        "LANGCHAIN_ENDPOINT",
        "LANGSMITH_TRACING",
        "LANGCHAIN_TRACING_V2",
        "LANGSMITH_TRACING_V2",
    ):
        monkeypatch.delenv(name, raising=False)


def random_case(rng: random.Random) -> tuple[list[str], dict[str, int]]:
    """A random ranking (possibly with duplicates, possibly empty) and graded judgements."""
    pool = [f"d{index}" for index in range(rng.randint(1, 40))]
    ranking = [rng.choice(pool) for _ in range(rng.randint(0, 30))]
    judged = rng.sample(pool, rng.randint(1, min(len(pool), 8)))
    relevant = {document: rng.randint(1, 3) for document in judged}
    return ranking, relevant


def ranx_reference(ranking: list[str], relevant: dict[str, int], metric: str) -> float:
    """The whole-run path: a run of one query through run_from_rankings' scoring and ranx."""
    scores: dict[str, float] = {}
    for position, document in enumerate(ranking):
        scores.setdefault(document, float(len(ranking) - position))
    return evaluate_run({"q": scores}, {"q": relevant}, [metric])[metric]


@pytest.mark.parametrize("metric", ["ndcg@10", "mrr@10", "recall@100", "recall@5", "map"])
def test_evaluators_equal_ranx_on_random_rankings(metric: str) -> None:
    evaluator = retrieval_evaluator(metric)
    rng = random.Random(f"seed-{metric}")
    for _ in range(60):
        ranking, relevant = random_case(rng)
        result = evaluator({"documents": ranking}, {"relevant": relevant})
        assert result["key"] == metric
        assert result["score"] == pytest.approx(ranx_reference(ranking, relevant, metric))


def test_evaluators_hand_values_and_degenerate_inputs() -> None:
    reference = {"relevant": {"d2": 1, "d3": 1}}
    ndcg_at_10 = retrieval_evaluator("ndcg@10")
    recall_at_2 = retrieval_evaluator("recall@2")
    assert recall_at_2({"documents": ["d1", "d2", "d3"]}, reference)["score"] == 0.5
    assert retrieval_evaluator("mrr@10")({"documents": ["d1", "d2"]}, reference)["score"] == 0.5
    assert ndcg_at_10({"documents": []}, reference)["score"] == 0.0
    assert ndcg_at_10(None, reference)["score"] == 0.0  # a failed target run
    assert ndcg_at_10.__name__ == "ndcg_at_10"
    with pytest.raises(ValueError, match="relevant"):
        ndcg_at_10({"documents": ["d1"]}, {})
    with pytest.raises(ValueError, match="metric must be"):
        retrieval_evaluator("")


def test_langsmith_configured_reads_the_api_key() -> None:
    assert not langsmith_configured({})
    assert not langsmith_configured({"LANGSMITH_API_KEY": " "})
    assert langsmith_configured({"LANGSMITH_API_KEY": "key"})


def test_local_examples_hold_queries_and_qrels(tiny_beir: Path) -> None:
    dataset = load_beir(tiny_beir)
    examples = local_examples(dataset)
    assert [example.inputs["query_id"] for example in examples] == ["q1", "q2", "q3"]
    assert examples[1].outputs == {"relevant": {"d4": 1, "d2": 1}}
    assert [example.id for example in local_examples(dataset)] == [e.id for e in examples]


def test_langsmith_evaluate_locally_matches_evaluate_run(
    tiny_beir: Path, langsmith_recorder
) -> None:  # type: ignore[no-untyped-def]
    import langsmith

    dataset = load_beir(tiny_beir)
    indexes = Indexes(dataset.corpus, cache_dir=None)
    client = langsmith.Client(api_key="fake", api_url=langsmith_recorder.url, info={})

    _, (experiment,) = run_langsmith_experiments(dataset, ["bm25"], upload=False, client=client)
    client.flush()

    expected = evaluate_run(
        run_setups(dataset, [setup_by_name("bm25")], indexes)["bm25"], dataset.qrels
    )
    assert experiment.scores == pytest.approx(expected)
    assert set(experiment.scores) == {"ndcg@10", "recall@100", "mrr@10", "map"}
    assert experiment.url is None and not experiment.uploaded
    assert experiment.dataset_name == "tiny-test"
    assert langsmith_recorder.requests == []  # nothing left the process


def test_langsmith_evaluate_scores_a_weak_setup_like_ranx(tiny_beir: Path) -> None:
    """A retrieval that ranks the relevant documents low scores below 1, exactly as ranx does."""
    from langchain_core.documents import Document
    from langchain_core.runnables import RunnableLambda

    from rag_fusion_chain.evaluate import Setup

    dataset = load_beir(tiny_beir)
    order = ["d5", "d2", "d3", "d1", "d4"]
    reverse = RunnableLambda(lambda question: [Document("x", id=doc) for doc in order])
    setup = Setup("fixed", lambda indexes: reverse, "a fixed ranking")

    _, (experiment,) = run_langsmith_experiments(dataset, [setup], upload=False)

    run = {
        query: {doc: float(len(order) - i) for i, doc in enumerate(order)}
        for query in dataset.qrels
    }
    expected = evaluate_run(run, dataset.qrels)
    assert experiment.scores == pytest.approx(expected)
    assert 0.0 < experiment.scores["ndcg@10"] < 1.0


def test_eval_command_with_langsmith_unconfigured_evaluates_locally(
    tiny_beir: Path, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from rag_fusion_chain.cli import app

    out = tmp_path / "out.json"
    result = CliRunner().invoke(
        app,
        ["eval", str(tiny_beir), "--setups", "bm25", "--langsmith", "--json", str(out)],
        terminal_width=200,
    )

    assert result.exit_code == 0, result.output
    assert "LangSmith is not configured (LANGSMITH_API_KEY); evaluated locally" in result.output
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["dataset"] == "tiny" and list(data["setups"]) == ["bm25"]
    assert set(data["setups"]["bm25"]) == {"ndcg@10", "recall@100", "mrr@10", "map"}


def test_eval_command_with_langsmith_configured_runs_experiments(
    tiny_beir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Configured: the CLI runs one experiment per setup and prints where each is.

    The experiments themselves run locally (``upload=False``): the recorder does not speak the
    dataset and experiment API, so the upload path is not exercised here.
    """
    from typer.testing import CliRunner

    from rag_fusion_chain import evaluate
    from rag_fusion_chain.cli import app
    from rag_fusion_chain.evaluate import langsmith_experiment

    calls = []

    def local_experiments(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args)
        return langsmith_experiment.run_langsmith_experiments(*args, upload=False, **kwargs)

    monkeypatch.setenv("LANGSMITH_API_KEY", "fake-key")
    monkeypatch.setattr(evaluate, "run_langsmith_experiments", local_experiments)
    out = tmp_path / "out.json"

    result = CliRunner().invoke(
        app,
        ["eval", str(tiny_beir), "--setups", "bm25", "--langsmith", "--json", str(out)],
        terminal_width=200,
    )

    assert result.exit_code == 0, result.output
    assert len(calls) == 1
    assert "not configured" not in result.output
    assert "LangSmith experiments" in result.output
    assert "bm25: tiny-test-bm25-" in result.output and "at dataset tiny-test" in result.output
    data = json.loads(out.read_text(encoding="utf-8"))
    dataset = load_beir(tiny_beir)
    indexes = Indexes(dataset.corpus, cache_dir=None)
    expected = evaluate_run(
        run_setups(dataset, [setup_by_name("bm25")], indexes)["bm25"], dataset.qrels
    )
    assert data["setups"]["bm25"] == pytest.approx(expected)
