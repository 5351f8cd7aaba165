"""Tests of rag_fusion_chain.evaluate: BEIR loading, ranx wiring, the embedding cache, outputs.

Everything runs on a tiny BEIR dataset written to tmp_path, with fake embeddings, except
``test_bm25_on_full_scifact``, which needs the SciFact copy next to the repository.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from rich.table import Table

from rag_fusion_chain.evaluate import (
    CachedEmbeddings,
    Comparison,
    Indexes,
    Summary,
    compare_runs,
    comparison_table,
    evaluate_run,
    load_beir,
    run_from_rankings,
    run_setups,
    setup_by_name,
    write_json,
    write_plot,
)
from rag_fusion_chain.evaluate.metrics import per_query_scores
from rag_fusion_chain.evaluate.report import marked_score, results_json, y_limits
from tests.test_benchmarks_smoke import load_script

SCIFACT_DIR = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "scifact"

CORPUS = [
    {"_id": "d1", "title": "Solar panels", "text": "Photovoltaic cells turn sunlight into power."},
    {"_id": "d2", "title": "Wind turbines", "text": "Blades turn wind into electricity."},
    {"_id": "d3", "title": "", "text": "Heat pumps move heat from cold air into houses."},
    {"_id": "d4", "title": "Batteries", "text": "Lithium batteries store electricity overnight."},
    {"_id": "d5", "title": "Hydro power", "text": "Dams turn falling water into electricity."},
]
QUERIES = [
    {"_id": "q1", "text": "how do solar panels make power from sunlight"},
    {"_id": "q2", "text": "storing electricity in batteries"},
    {"_id": "q3", "text": "heat pumps for houses"},
    {"_id": "q9", "text": "a training query without test judgements"},
]
FEEDBACK_TEXTS = [
    "The compressor squeezes the refrigerant vapour. The compressor needs power to run.",
    "The refrigerant carries heat between two coils.",
    "The refrigerant evaporates in the outdoor coil.",
]
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td4\t1\nq2\td2\t1\nq3\td3\t1\n"


def write_tiny_beir(directory: Path) -> Path:
    """Write the tiny dataset in the BEIR layout and return its directory."""
    (directory / "qrels").mkdir(parents=True)
    for name, records in (("corpus.jsonl", CORPUS), ("queries.jsonl", QUERIES)):
        lines = [json.dumps({**record, "metadata": {}}) for record in records]
        (directory / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (directory / "qrels" / "test.tsv").write_text(QRELS, encoding="utf-8")
    return directory


@pytest.fixture
def tiny_beir(tmp_path: Path) -> Path:
    return write_tiny_beir(tmp_path / "tiny")


class CountingEmbeddings(Embeddings):
    """Bag-of-letters vectors; counts how many texts reach the "encoder"."""

    model_identity = "counting-letters-26"

    def __init__(self) -> None:
        self.encoded_texts = 0
        self.calls = 0

    def _vector(self, text: str) -> list[float]:
        counts = [float(text.lower().count(chr(ord("a") + index))) for index in range(26)]
        norm = math.sqrt(sum(value * value for value in counts)) or 1.0
        return [value / norm for value in counts]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        self.encoded_texts += len(texts)
        return [self._vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


# --------------------------------------------------------------------------------------------
# load_beir
# --------------------------------------------------------------------------------------------


def test_load_beir_reads_corpus_queries_and_qrels(tiny_beir: Path) -> None:
    dataset = load_beir(tiny_beir)

    assert dataset.name == "tiny"
    assert [document.id for document in dataset.corpus] == ["d1", "d2", "d3", "d4", "d5"]
    assert dataset.corpus[0].page_content == (
        "Solar panels\nPhotovoltaic cells turn sunlight into power."
    )
    assert dataset.corpus[2].page_content == "Heat pumps move heat from cold air into houses."
    assert list(dataset.queries) == ["q1", "q2", "q3"]  # q9 has no judgements in the split
    assert dataset.qrels == {"q1": {"d1": 1}, "q2": {"d4": 1, "d2": 1}, "q3": {"d3": 1}}


@pytest.mark.parametrize(
    "row",
    [b"q1\td1", b"q1\td1\tabc", b"q1\td1\tnan", b"q1\td1\tinf", b"q1\t\xff\t1"]
    + [b"q1\t" + b"d" * 200_000 + b"\t1", b'q1\t"' + b"d" * 200_000],  # over csv's field limit
)
def test_a_bad_qrels_row_is_named_with_its_file_and_line(tiny_beir: Path, row: bytes) -> None:
    """A bad score was "could not convert string to float: 'abc'", naming no file; a field over
    csv's 128 KB limit, or not UTF-8, was a bare csv.Error (UnicodeDecodeError)."""
    qrels = tiny_beir / "qrels" / "test.tsv"
    qrels.write_bytes(QRELS.encode() + row + b"\n" + QRELS.encode())
    with pytest.raises(ValueError, match=r"test\.tsv:6: expected query-id, corpus-id, score; got"):
        load_beir(tiny_beir)


def test_load_beir_limits_queries_and_checks_the_layout(tiny_beir: Path, tmp_path: Path) -> None:
    limited = load_beir(tiny_beir, queries_limit=2)
    assert list(limited.queries) == ["q1", "q2"] and list(limited.qrels) == ["q1", "q2"]

    with pytest.raises(FileNotFoundError, match="qrels/dev.tsv"):
        load_beir(tiny_beir, split="dev")
    with pytest.raises(FileNotFoundError, match="not a directory"):
        load_beir(tmp_path / "missing")
    with pytest.raises(ValueError, match="queries_limit"):
        load_beir(tiny_beir, queries_limit=0)


@pytest.mark.parametrize("name", ["corpus.jsonl", "queries.jsonl", "test.tsv"])
def test_a_beir_file_swapped_for_a_fifo_after_its_check_fails_at_once(
    tiny_beir: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # each file was checked with is_file(), then opened again by name: a FIFO swapped in between
    # blocked the load for ever
    from tests.test_security import hang_guard

    is_file = Path.is_file

    def checked_then_swapped(path: Path) -> bool:
        found = is_file(path)
        if found and path.name == name:
            path.unlink()
            os.mkfifo(path)
        return found

    monkeypatch.setattr(Path, "is_file", checked_then_swapped)
    with hang_guard(5), pytest.raises(ValueError, match=f"{name} is not a regular file"):
        load_beir(tiny_beir)


def test_load_beir_names_judged_queries_without_text_and_warns_of_absent_documents(
    tiny_beir: Path,
) -> None:
    # an empty query ran every setup up to the offline one, then failed naming no query; qrels
    # judging documents absent from the corpus scored them as misses without a word
    queries = tiny_beir / "queries.jsonl"
    text = queries.read_text("utf-8")
    queries.write_text(text.replace("heat pumps for houses", " "), "utf-8")
    with pytest.raises(ValueError, match=r"judges 1 query absent .* without text .*\['q3'\]"):
        load_beir(tiny_beir)
    queries.write_text(text, "utf-8")
    qrels = tiny_beir / "qrels" / "test.tsv"
    qrels.write_text(QRELS + "q3\tgone-1\t1\nq1\tgone-2\t2\n", "utf-8")
    with pytest.warns(UserWarning, match=r"2 judged documents absent .* \['gone-1', 'gone-2'\]"):
        dataset = load_beir(tiny_beir)
    assert dataset.qrels["q3"] == {"d3": 1, "gone-1": 1}  # kept: they count as misses


# --------------------------------------------------------------------------------------------
# Metrics (ranx computes; these check the wiring against hand-computed values)
# --------------------------------------------------------------------------------------------

HAND_QRELS = {"q1": {"d1": 1, "d3": 1}, "q2": {"d2": 1}, "q3": {"d5": 1}}
HAND_RUN = {"q1": {"d2": 3.0, "d1": 2.0, "d3": 1.0}, "q2": {"d3": 2.0, "d1": 1.0}}  # q3 unanswered


def test_evaluate_run_matches_hand_computed_metrics() -> None:
    metrics = evaluate_run(HAND_RUN, HAND_QRELS)

    # q1: relevant at ranks 2 and 3; q2 finds nothing relevant; q3 is unanswered (counts as 0).
    ndcg_q1 = (1 / math.log2(3) + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    assert metrics["ndcg@10"] == pytest.approx(ndcg_q1 / 3)
    assert metrics["recall@100"] == pytest.approx(1 / 3)
    assert metrics["mrr@10"] == pytest.approx(0.5 / 3)
    assert metrics["map"] == pytest.approx(((1 / 2 + 2 / 3) / 2) / 3)
    assert list(metrics) == ["ndcg@10", "recall@100", "mrr@10", "map"]


def test_evaluate_run_respects_the_cutoff_and_empty_runs() -> None:
    run = {"q1": {f"x{rank}": 20.0 - rank for rank in range(10)} | {"d1": 5.0}}
    assert evaluate_run(run, {"q1": {"d1": 1}}, ["mrr@10", "recall@100"]) == {
        "mrr@10": 0.0,
        "recall@100": 1.0,
    }
    assert evaluate_run({}, HAND_QRELS, ["map"]) == {"map": 0.0}


def test_run_from_rankings_keeps_the_kit_order_and_ids() -> None:
    tied = [Document("b", id="B", metadata={"score": 1.0}), Document("a", id="A")]
    run = run_from_rankings({"q1": tied + [Document("b again", id="B")]})

    assert run == {"q1": {"B": 3.0, "A": 2.0}}  # duplicates keep their best rank
    assert evaluate_run(run, {"q1": {"B": 1}}, ["mrr@10"]) == {"mrr@10": 1.0}


def test_compare_runs_gives_p_values_against_the_first_run() -> None:
    better = {"q1": {"d1": 2.0, "d2": 1.0}, "q2": {"d2": 1.0}, "q3": {"d1": 1.0}}
    runs = {"first": HAND_RUN, "second": better, "same": HAND_RUN}
    comparison = compare_runs(runs, HAND_QRELS, ["mrr@10"])

    assert comparison.baseline == "first" and comparison.stat_test == "student"
    assert comparison.scores["second"]["mrr@10"] == pytest.approx(2 / 3)
    assert comparison.p_values["first"] == {}
    assert 0.0 < comparison.p_values["second"]["mrr@10"] < 1.0
    assert comparison.p_values["same"]["mrr@10"] == 1.0  # identical per query: no difference
    assert not comparison.is_significant("same", "mrr@10")
    fisher = compare_runs(runs, HAND_QRELS, ["mrr@10"], stat_test="fisher", permutations=200)
    assert fisher.stat_test == "fisher" and 0.0 < fisher.p_values["second"]["mrr@10"] <= 1.0
    with pytest.raises(ValueError, match="stat_test"):
        compare_runs({"first": HAND_RUN}, HAND_QRELS, stat_test="wilcoxon")


# --------------------------------------------------------------------------------------------
# Embedding cache
# --------------------------------------------------------------------------------------------


def test_cached_embeddings_encode_each_text_once(tmp_path: Path) -> None:
    model = CountingEmbeddings()
    cached = CachedEmbeddings(model, tmp_path, batch_size=2)
    first = cached.embed_documents(["alpha", "beta", "alpha", "gamma"])
    assert model.encoded_texts == 3 and model.calls == 2  # "alpha" once; batches of two

    again = CachedEmbeddings(model, tmp_path)
    assert again.embed_documents(["gamma", "alpha"]) == [first[3], first[0]]
    assert model.encoded_texts == 3
    assert again.embed_query("alpha") != [] and model.encoded_texts == 4  # queries keyed apart

    files = sorted(path.suffix for path in tmp_path.rglob("*") if path.is_file())
    assert set(files) == {".npz"}  # one npz shard per batch, read without pickle


def test_second_run_calls_the_encoder_zero_times(tiny_beir: Path, tmp_path: Path) -> None:
    dataset = load_beir(tiny_beir)
    setups = [setup_by_name("dense")]
    first_model = CountingEmbeddings()
    first = run_setups(dataset, setups, Indexes(dataset.corpus, first_model, tmp_path / "cache"))
    assert first_model.encoded_texts == len(dataset.corpus) + len(dataset.queries)

    second_model = CountingEmbeddings()
    second = run_setups(dataset, setups, Indexes(dataset.corpus, second_model, tmp_path / "cache"))
    assert second_model.calls == 0
    assert second == first


class PrecisionEmbeddings(CountingEmbeddings):
    """One model identity whose vectors depend on the precision it computes in, as MiniLM's do
    (OpenVINO picks bf16 or f32 by CPU; ``models.embedding_precision`` reads it)."""

    def __init__(self, precision: str) -> None:
        super().__init__()
        self.embedding_precision = precision

    def _vector(self, text: str) -> list[float]:
        vector = super()._vector(text)
        return vector if self.embedding_precision == "f32" else [round(x, 2) for x in vector]


def test_the_cache_never_serves_vectors_of_another_precision(
    tiny_beir: Path, tmp_path: Path
) -> None:
    dataset = load_beir(tiny_beir)
    setups, cache = [setup_by_name("dense")], tmp_path / "cache"
    f32 = PrecisionEmbeddings("f32")
    run_setups(dataset, setups, Indexes(dataset.corpus, f32, cache))

    bf16 = PrecisionEmbeddings("bf16")
    indexes = Indexes(dataset.corpus, bf16, cache)
    run_setups(dataset, setups, indexes)
    assert bf16.encoded_texts == len(dataset.corpus) + len(dataset.queries)  # nothing reused
    expected = {"depth": 100, "embedding": f32.model_identity, "precision": "bf16"}
    assert indexes.settings() == expected
    cached = CachedEmbeddings(bf16, cache).embed_query(dataset.queries["q1"])
    assert cached == pytest.approx(bf16.embed_query(dataset.queries["q1"]), abs=1e-6)
    assert cached != pytest.approx(f32.embed_query(dataset.queries["q1"]), abs=1e-6)

    f32_again = PrecisionEmbeddings("f32")
    run_setups(dataset, setups, Indexes(dataset.corpus, f32_again, cache))
    assert f32_again.calls == 0  # each precision keeps its own vectors


# --------------------------------------------------------------------------------------------
# Setups, outputs
# --------------------------------------------------------------------------------------------


def test_run_setups_measures_the_kit_retrievers(tiny_beir: Path, tmp_path: Path) -> None:
    dataset = load_beir(tiny_beir)
    names = ["bm25", "dense", "hybrid-rrf", "hybrid-relative", "hybrid-dist", "hybrid"]
    progress: list[tuple[str, int, int]] = []

    def record(task: str, completed: int, total: int) -> None:
        progress.append((task, completed, total))

    indexes = Indexes(dataset.corpus, CountingEmbeddings(), tmp_path, depth=3, progress=record)
    setups = [setup_by_name(name) for name in names]
    runs = run_setups(dataset, setups, indexes, batch_size=2, progress=record)

    assert list(runs) == names
    assert next(iter(runs["bm25"]["q1"])) == "d1"  # "solar panels ... sunlight" finds d1 first
    assert all(len(ranking) <= 3 for run in runs.values() for ranking in run.values())
    assert runs["hybrid"] == runs["hybrid-dist"]  # the recommended default fusion
    assert ("querying bm25", 3, 3) in progress and ("querying hybrid-rrf", 2, 3) in progress
    assert ("indexing bm25", 1, 1) in progress and ("embedding corpus", 5, 5) in progress
    with pytest.raises(ValueError, match="unknown setup"):
        setup_by_name("bm26")


def test_the_rrf_constant_is_rank_constant_in_setups_and_their_settings() -> None:
    """One name per setting: ``rrf_k`` (keyword and JSON key) is ``rank_constant`` as in fusion."""
    from rag_fusion_chain.evaluate.setups import hybrid_setup
    from rag_fusion_chain.fusion import ReciprocalRankFusion

    assert setup_by_name("hybrid-rrf", rank_constant=10).settings == {
        "retrievers": ["bm25", "dense"],
        "fusion": "ReciprocalRankFusion",
        "rank_constant": 10,
        "weights": [0.5, 0.5],
    }
    assert hybrid_setup(ReciprocalRankFusion(rank_constant=7)).settings["rank_constant"] == 7
    assert "rank_constant" not in setup_by_name("hybrid-dist").settings


def test_results_json_records_the_data_settings_and_p_values(tmp_path: Path) -> None:
    better = {"q1": {"d1": 2.0, "d2": 1.0}, "q2": {"d2": 1.0}, "q3": {"d1": 1.0}}
    comparison = compare_runs({"first": HAND_RUN, "second": better}, HAND_QRELS, ["mrr@10", "map"])
    summary = Summary(
        "tiny",
        comparison.scores,
        split="dev",
        query_count=3,
        queries_limit=3,
        settings={"first": {"fusion": "none"}, "second": {"fusion": "rrf", "rank_constant": 30}},
        indexes={"depth": 100},
        comparison=comparison,
    )
    path = write_json(tmp_path / "out" / "results.json", summary)

    data = json.loads(path.read_text(encoding="utf-8"))
    assert data == results_json(summary)
    assert (data["dataset"], data["split"], data["query_count"], data["queries_limit"]) == (
        "tiny",
        "dev",
        3,
        3,
    )
    assert data["setups"]["second"] == pytest.approx(comparison.scores["second"])
    assert data["settings"]["second"] == {"fusion": "rrf", "rank_constant": 30}
    assert data["test"] == {"baseline": "first", "stat_test": "student", "max_p": 0.05}
    assert data["p_values"]["first"] == {}
    assert data["p_values"]["second"]["map"] == pytest.approx(comparison.p_values["second"]["map"])
    without_comparison = results_json(Summary("tiny", {"bm25": {"map": 0.4}}))
    assert "p_values" not in without_comparison and without_comparison["settings"] == {"bm25": {}}


def test_title_names_the_queries_limit() -> None:
    assert Summary("tiny", {}, query_count=3).title == "tiny (test, 3 queries)"
    assert Summary("tiny", {}, query_count=1).title == "tiny (test, 1 query)"  # not "1 queries"
    limited = Summary("tiny", {}, split="dev", query_count=2, queries_limit=2)
    assert limited.title == "tiny (dev, 2 queries, --queries-limit 2)"


def test_chart_zooms_to_the_data_and_marks_significant_values(tmp_path: Path) -> None:
    low, high = y_limits([0.6451, 0.6898, 0.7303])
    assert 0.55 <= low <= 0.6451 and 0.7303 < high <= 0.85  # not the old fixed 0..1.18
    assert y_limits([0.01, 0.02])[0] == 0.0  # never below zero
    assert y_limits([0.64, 0.73]) == (0.6, 0.79)  # 0.4 and 0.6 of the spread, to hundredths
    with pytest.raises(ValueError, match="values"):
        y_limits([])

    better = {"q1": {"d1": 2.0, "d2": 1.0}, "q2": {"d2": 1.0}, "q3": {"d1": 1.0}}
    comparison = compare_runs(
        {"first": HAND_RUN, "second": better, "same": HAND_RUN}, HAND_QRELS, ["mrr@10"]
    )
    summary = Summary("tiny", comparison.scores, comparison=comparison)
    labels = [marked_score(summary, setup, "mrr@10") for setup in summary.scores]
    assert labels[0] == "0.167" and labels[2] == "0.167"  # baseline and identical run: no mark
    assert labels[1].endswith("*") == comparison.is_significant("second", "mrr@10")
    forced = Summary(
        "tiny",
        comparison.scores,
        comparison=Comparison(
            comparison.scores, {"second": {"mrr@10": 0.001}}, "first", "student", 0.05
        ),
    )
    assert marked_score(forced, "second", "mrr@10").endswith("*")

    path = write_plot(tmp_path / "plot.png", summary)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def table_cells(table: Table) -> tuple[list[str], list[list[str]]]:
    """A rich table's headers and rows, as text."""
    rows = zip(*(column.cells for column in table.columns), strict=True)
    return [str(column.header) for column in table.columns], [list(map(str, row)) for row in rows]


def test_table_has_a_significance_column() -> None:
    better = {"q1": {"d1": 2.0, "d2": 1.0}, "q2": {"d2": 1.0}, "q3": {"d1": 1.0}}
    comparison = compare_runs({"first": HAND_RUN, "second": better}, HAND_QRELS, ["mrr@10", "map"])
    table = comparison_table(Summary("tiny", comparison.scores, comparison=comparison))
    headers, rows = table_cells(table)

    assert headers == ["setup", "mrr@10", "map", "p mrr@10"]
    assert table.caption == "p: paired student test against first; * p < 0.05"
    assert rows[0] == ["first", "0.1667", "0.1944", "-"]
    assert float(rows[1][3]) == pytest.approx(comparison.p_values["second"]["mrr@10"], abs=1e-4)
    significant = comparison.is_significant("second", "mrr@10")
    assert rows[1][1].endswith("*") == significant
    langsmith = comparison_table(Summary("tiny", comparison.scores), ["exp-1", "exp-2"])
    headers, rows = table_cells(langsmith)  # LangSmith: no tests, the experiments named
    assert headers == ["setup", "mrr@10", "map", "experiment"] and langsmith.caption is None
    assert rows[0] == ["first", "0.1667", "0.1944", "exp-1"]
    assert str(langsmith.title).endswith(", LangSmith experiments")
    with pytest.raises(ValueError):  # an experiment per setup, none dropped or left blank
        comparison_table(Summary("tiny", comparison.scores), ["exp-1"])
    alone = compare_runs({"first": HAND_RUN}, HAND_QRELS, ["mrr@10", "map"])
    headers, rows = table_cells(comparison_table(Summary("tiny", alone.scores, comparison=alone)))
    assert headers == ["setup", "mrr@10", "map"], "a p column for one setup, always '-'"
    assert rows == [["first", "0.1667", "0.1944"]]


# --------------------------------------------------------------------------------------------
# Full SciFact (bounded; skipped without the data)
# --------------------------------------------------------------------------------------------


@pytest.mark.timeout(180)
@pytest.mark.skipif(
    not (SCIFACT_DIR / "corpus.jsonl").is_file(),
    reason=f"SciFact (BEIR layout) not found at {SCIFACT_DIR}",
)
def test_bm25_on_full_scifact() -> None:
    dataset = load_beir(SCIFACT_DIR)
    assert len(dataset.corpus) == 5183 and len(dataset.queries) == 300

    runs = run_setups(dataset, [setup_by_name("bm25")], Indexes(dataset.corpus, cache_dir=None))
    metrics = evaluate_run(runs["bm25"], dataset.qrels)
    assert metrics["ndcg@10"] >= 0.68


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def test_eval_of_one_setup_shows_no_p_value_and_a_failure_leaves_no_bar(
    tiny_beir: Path, tmp_path: Path
) -> None:
    """One setup printed a p column of '-' under a caption about a paired test; a dataset that
    failed to load left its ``loading dataset 0%`` bar above the error line."""
    from typer.testing import CliRunner

    from rag_fusion_chain.cli import app

    alone = CliRunner().invoke(app, ["eval", str(tiny_beir), "--setups", "bm25", "--no-cache"])
    assert alone.exit_code == 0, alone.output
    assert "ndcg@10" in alone.stdout and "p ndcg@10" not in alone.stdout
    assert "paired" not in alone.stdout
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n', "utf-8")
    failed = CliRunner().invoke(app, ["eval", str(tmp_path), "--setups", "bm25"])
    assert failed.exit_code == 1 and "error: dataset_dir:" in failed.stderr
    assert "loading dataset" not in failed.stderr and "%" not in failed.stderr


def test_eval_command_end_to_end(
    tiny_beir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from rag_fusion_chain import models
    from rag_fusion_chain.cli import app

    encoder = CountingEmbeddings()
    monkeypatch.setattr(models, "embeddings", lambda name=None, **kwargs: encoder)
    arguments = [
        "eval",
        str(tiny_beir),
        "--setups",
        "bm25,dense,hybrid-rrf,decomposition-offline",
        "--model",
        "offline",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--json",
        str(tmp_path / "out.json"),
        "--plot",
        str(tmp_path / "out.png"),
    ]

    result = CliRunner().invoke(app, arguments, terminal_width=200)

    assert result.exit_code == 0, result.output
    # said before the wait: the dense setups embed the corpus, and where the cache is
    assert "embed the corpus (" in result.stderr and str(tmp_path / "cache") in result.stderr
    low, high = re.search(r"about ([\d.e-]+)-([\d.e-]+) min", result.stderr).groups()  # type: ignore[union-attr]
    assert 0 < float(low) < float(high)  # was "about 0-0 min" below 750 passages
    assert "p ndcg@10" in result.output and "paired student test against bm25" in result.output
    data = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert data["dataset"] == "tiny" and data["split"] == "test" and data["query_count"] == 3
    assert list(data["setups"]) == ["bm25", "dense", "hybrid-rrf", "decomposition-offline"]
    assert data["settings"]["decomposition-offline"]["n"] == 3  # its own, -n unset
    assert data["settings"]["hybrid-rrf"]["rank_constant"] == 30
    assert data["indexes"]["embedding"] == "counting-letters-26"
    assert set(data["p_values"]["dense"]) == {"ndcg@10", "recall@100", "mrr@10", "map"}
    assert set(data["setups"]["dense"]) == {"ndcg@10", "recall@100", "mrr@10", "map"}
    assert (tmp_path / "out.png").read_bytes()[:4] == b"\x89PNG"

    encoded = encoder.encoded_texts
    again = CliRunner().invoke(app, arguments[:8], terminal_width=200)  # same cache, no outputs
    assert again.exit_code == 0, again.output
    assert encoder.encoded_texts == encoded  # everything came from the cache


def test_eval_command_shows_the_queries_limit(tiny_beir: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from rag_fusion_chain.cli import app

    arguments = ["eval", str(tiny_beir), "--setups", "bm25", "--queries-limit", "2"]
    result = CliRunner().invoke(
        app, [*arguments, "--json", str(tmp_path / "limited.json")], terminal_width=200
    )

    assert result.exit_code == 0, result.output
    assert "tiny (test, 2 queries, --queries-limit 2)" in result.output
    data = json.loads((tmp_path / "limited.json").read_text(encoding="utf-8"))
    assert data["query_count"] == 2 and data["queries_limit"] == 2


def test_eval_command_refuses_an_unknown_setup_before_anything_else(
    tiny_beir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedding note (and LangSmith's) came first, then the error."""
    from typer.testing import CliRunner

    from rag_fusion_chain.cli import app

    monkeypatch.delenv("LANGSMITH_API_KEY", raising=False)
    arguments = ["eval", str(tiny_beir), "--setups", "dense,bm52", "--langsmith"]
    result = CliRunner().invoke(app, arguments, terminal_width=400)
    assert result.exit_code == 1 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: --setups: unknown setup 'bm52'; known: bm25, dense, hybrid-rrf")


def test_eval_command_refuses_a_repeated_setup_before_anything_else(tiny_beir: Path) -> None:
    """A repeated name: the embedding note came first, then run_setups' "names must be unique"."""
    from typer.testing import CliRunner

    from rag_fusion_chain.cli import app

    for setups in ("dense, bm25,dense", " , "):
        arguments = ["eval", str(tiny_beir), "--setups", setups]
        result = CliRunner().invoke(app, arguments, terminal_width=400)
        assert result.exit_code == 1 and result.stdout == ""
        (line,) = result.stderr.splitlines()
        assert line == f"error: --setups: name each setup once, e.g. bm25,dense; got {setups!r}"


def test_a_setup_that_would_repeat_another_is_refused_with_the_reason(tiny_beir: Path) -> None:
    """multi-query-offline equalled bm25 to four decimals (p = 1.0): the union keeps the
    question's list first. It is not offered, and the user is told why."""
    from typer.testing import CliRunner

    from rag_fusion_chain.cli import app

    result = CliRunner().invoke(app, ["eval", str(tiny_beir), "--setups", "multi-query-offline"])
    assert result.exit_code == 1
    assert "not offered" in result.stderr and "rag-fusion-offline" in result.stderr
    unknown = CliRunner().invoke(app, ["eval", str(tiny_beir), "--setups", "nope"])
    assert "multi-query-offline" not in unknown.stderr and "rag-fusion-offline" in unknown.stderr


def test_a_strategy_setup_generates_the_strategys_own_n_unless_given() -> None:
    """``eval -n`` was 4 for every strategy: decomposition 4 sub-questions, multi-query 4. ``n``
    names the generated queries as in ``chain_for`` (it was ``query_count``, which also named
    the evaluated queries); 0 fell back to the default and a strategy writing one text took any."""
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.language_models import FakeListLLM

    from rag_fusion_chain import strategies
    from rag_fusion_chain.evaluate.setups import Indexes, setup_by_name, strategy_setup

    corpus = [Document("Reciprocal rank fusion sums inverse ranks.", id="d1")]
    indexes = Indexes(corpus, DeterministicFakeEmbedding(size=8), cache_dir=None, depth=1)

    for strategy in strategies.STRATEGIES:
        default_n = strategies.get(strategy).default_n
        assert strategy_setup(strategy).settings["n"] == default_n
        if default_n is None:  # one query or passage: no count to give
            with pytest.raises(ValueError, match=f"n: {strategy} writes one"):
                strategy_setup(strategy, n=2).build(indexes)
            assert setup_by_name(strategy, llm=FakeListLLM(responses=[]), n=2).settings["n"] is None
        else:
            assert strategy_setup(strategy, n=2).settings["n"] == 2
            assert setup_by_name(strategy, llm=FakeListLLM(responses=[]), n=2).settings["n"] == 2
    with pytest.raises(ValueError, match="greater than 0"):
        strategy_setup("rag-fusion", n=0).build(indexes)


def test_eval_refuses_queries_when_no_setup_generates_several(tiny_beir: Path) -> None:
    """``eval --setups bm25,hyde-offline -n 3`` ran and ignored ``-n``."""
    from typer.testing import CliRunner

    from rag_fusion_chain.cli import app

    arguments = ["eval", str(tiny_beir), "--setups", "bm25,hyde-offline", "-n", "3"]
    result = CliRunner().invoke(app, arguments)

    assert result.exit_code != 0
    assert "--queries: none of bm25, hyde-offline generates several queries" in result.stderr


def test_sweep_benchmark_runs_on_the_tiny_dataset(
    tiny_beir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rag_fusion_chain import models

    monkeypatch.setattr(models, "embeddings", lambda name=None, **kwargs: CountingEmbeddings())
    sweep = load_script("eval_scifact")
    out = tmp_path / "sweep.md"

    summary = sweep.main(
        [
            "--dataset",
            str(tiny_beir),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--out",
            str(out),
            "--repeats",
            "2",
        ]
    )

    assert (
        0.0 <= summary["held_out_min"] <= summary["held_out_mean"] <= summary["held_out_max"] <= 1
    )
    report = out.read_text(encoding="utf-8")
    assert "Cross-validated estimate" in report and sweep.BASELINE in report
    assert report.count("| random ") == 4  # 2 random halvings, both directions


def test_cross_validation_never_scores_on_the_queries_it_chose_on() -> None:
    sweep = load_script("eval_scifact")
    queries = [f"q{index}" for index in range(8)]
    # "lucky" is perfect on the even queries only, the baseline is 0.5 everywhere: choosing on the
    # even half picks lucky, which then scores 0 on the odd half (no leak of the tuning half).
    per_query = {
        sweep.BASELINE: {query: 0.5 for query in queries},
        "lucky": {query: 1.0 if index % 2 == 0 else 0.0 for index, query in enumerate(queries)},
    }

    rows, held_out, chosen = sweep.cross_validate(per_query, queries, repeats=0)

    assert [row[1] for row in rows] == ["lucky", sweep.BASELINE]
    assert held_out == [0.0, 0.5] and chosen == {"lucky": 1, sweep.BASELINE: 1}


def test_offline_settings_benchmark_runs_every_candidate_and_restores_offline(
    tiny_beir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rag_fusion_chain import models, offline

    monkeypatch.setattr(models, "embeddings", lambda name=None, **kwargs: CountingEmbeddings())
    before = (offline._feedback_phrases, offline._document_frequency)
    settings = load_script("eval_offline_queries")
    out = tmp_path / "offline.md"

    summaries = settings.main(
        ["--dataset", str(tiny_beir), "--cache-dir", str(tmp_path / "c"), "--out", str(out)]
        + ["--repeats", "1", "--baseline", "48 terms"]
    )

    assert set(summaries) == {"adoptable", "all"}
    assert all(0.0 <= summary["held_out_mean"] <= 1.0 for summary in summaries.values())
    report = out.read_text(encoding="utf-8")
    assert all(label in report for label in [*settings.candidates([]), "| hybrid |"])
    assert report.count("| random ") == 4  # 1 random halving, both directions, two pools
    assert "### Pool: adoptable (48 terms, 12 terms, 24 terms, 36 terms)" in report
    assert (offline._feedback_phrases, offline._document_frequency) == before


def test_offline_settings_patches_change_only_what_they_name() -> None:
    from rag_fusion_chain import offline

    settings = load_script("eval_offline_queries")
    found = [Document(page_content=text) for text in FEEDBACK_TEXTS]
    question = "How do heat pumps work?"
    current = offline.feedback_queries(question, found, 2)
    with settings.strongest_terms(1):  # one term: one query adding one word
        assert offline.feedback_queries(question, found, 2) == [f"{question} compressor"]
    # "compressor" is rare among the retrieved documents but common in the collection
    corpus = [*found, *(Document(page_content=f"A compressor in machine {n}.") for n in range(20))]
    with settings.strongest_terms(1), settings.collection_idf(corpus):
        assert offline.feedback_queries(question, found, 2) == [f"{question} refrigerant"]
    assert offline.feedback_queries(question, found, 2) == current


def test_per_query_scores_average_to_the_run_score() -> None:
    per_query = per_query_scores(HAND_RUN, HAND_QRELS, "ndcg@10")

    assert set(per_query) == set(HAND_QRELS) and per_query["q3"] == 0.0  # unanswered query
    mean = sum(per_query.values()) / len(per_query)
    assert mean == pytest.approx(evaluate_run(HAND_RUN, HAND_QRELS, ["ndcg@10"])["ndcg@10"])


def test_numba_s_notice_of_ranx_s_own_uint64_cast_is_not_shown_but_others_are() -> None:
    """The first ``rag-fusion eval`` on a machine printed ``warning: unsafe cast from uint64 to
    int64. Precision may be lost.``: numba compiling ranx's ``prange`` loops (numba#7935), nothing
    about the user's data. Reproduced here as numba emits it (compiling takes about 30 s)."""
    import importlib
    import warnings

    from numba.core.errors import NumbaTypeSafetyWarning

    from rag_fusion_chain.evaluate.metrics import eval_library

    ranx_ndcg = importlib.import_module("ranx.metrics.ndcg").__file__

    notice = "unsafe cast from uint64 to int64. Precision may be lost."
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        eval_library("ranx")
        warnings.warn_explicit(notice, NumbaTypeSafetyWarning, ranx_ndcg, 72)
        warnings.warn_explicit(notice, NumbaTypeSafetyWarning, "/home/me/mine.py", 3)
        warnings.warn_explicit("another", NumbaTypeSafetyWarning, ranx_ndcg, 72)
    assert [(str(each.message), each.filename) for each in shown] == [
        (notice, "/home/me/mine.py"),
        ("another", ranx_ndcg),
    ]


def test_dense_index_leaves_the_callers_cached_embeddings_as_given(tmp_path: Path) -> None:
    """Indexes.dense() set on_progress = None on any CachedEmbeddings, the caller's own too."""
    from langchain_core.embeddings import DeterministicFakeEmbedding

    from rag_fusion_chain.evaluate.cache import CachedEmbeddings
    from rag_fusion_chain.evaluate.setups import Indexes

    calls: list[tuple[int, int]] = []
    given = CachedEmbeddings(
        DeterministicFakeEmbedding(size=8), tmp_path, on_progress=lambda *done: calls.append(done)
    )
    corpus = [Document("Reciprocal rank fusion sums inverse ranks.", id="d1")]
    Indexes(corpus, given, cache_dir=None, depth=1).dense()
    assert given.on_progress is not None and calls  # still reporting, as the caller set it
