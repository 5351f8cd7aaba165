"""BM25Retriever on real bm25s: tokenizer, ranking, identity, batching, persistence."""

from __future__ import annotations

import copy
import json
import random
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document

from rag_fusion_chain.fusion import document_id
from rag_fusion_chain.retrievers.bm25 import BM25Retriever, cjk_bigrams, tokenize

ENGLISH = [
    Document("Solar panels convert sunlight into electricity.", id="solar", metadata={"n": 1}),
    Document("Wind turbines are running day and night.", id="wind", metadata={"n": 2}),
    Document("The battery stores the energy of the day.", id="battery", metadata={"n": 3}),
    Document("Solar farms and solar roofs: solar energy everywhere.", id="solar-farm"),
]
CHINESE = [
    Document("光伏发电利用太阳能电池板把阳光转化为电能", id="pv"),
    Document("风力发电依靠风机叶片转动", id="wind-zh"),
    Document("水力发电站建在河流上", id="hydro"),
]


class RunCounter(BaseCallbackHandler):
    """Counts retriever runs reported to callbacks."""

    def __init__(self) -> None:
        self.starts: list[str] = []
        self.ends = 0

    def on_retriever_start(self, serialized: Any, query: str, **kwargs: Any) -> None:
        self.starts.append(query)

    def on_retriever_end(self, documents: Any, **kwargs: Any) -> None:
        self.ends += 1


def ids(documents: list[Document]) -> list[str | None]:
    return [document.id for document in documents]


# ---------------------------------------------------------------------------------- tokenizer


def test_tokenize_english_drops_stopwords_and_stems() -> None:
    assert tokenize("The running dogs are barking at THE cats") == ["run", "dog", "bark", "cat"]


def test_tokenize_switches_off_stemming_and_stopwords() -> None:
    assert tokenize("The running dogs", stem=False) == ["running", "dogs"]
    assert tokenize("The running dogs", remove_stopwords=False) == ["the", "run", "dog"]


def test_tokenize_chinese_runs_become_character_bigrams() -> None:
    assert tokenize("光伏发电") == ["光伏", "伏发", "发电"]
    assert cjk_bigrams("电") == ["电"]


def test_tokenize_mixed_text_keeps_order_and_normalises_full_width() -> None:
    assert tokenize("使用solar panels发电，ＡＢＣ 2024") == [
        "使用",
        "solar",
        "panel",
        "发电",
        "abc",
        "2024",
    ]


# ---------------------------------------------------------------------------------- retrieval


def test_stemming_matches_inflected_forms_only_when_enabled() -> None:
    stemmed = BM25Retriever.from_documents(ENGLISH, k=2)
    unstemmed = BM25Retriever.from_documents(ENGLISH, k=2, stem=False)
    assert ids(stemmed.invoke("run")) == ["wind"]
    assert unstemmed.invoke("run") == []


def test_stopword_only_query_matches_nothing_unless_stopwords_are_kept() -> None:
    assert BM25Retriever.from_documents(ENGLISH).invoke("the and of") == []
    kept = BM25Retriever.from_documents(ENGLISH, remove_stopwords=False).invoke("the and of")
    assert ids(kept)[0] == "battery"  # "the" twice and "of"


def test_chinese_bigram_retrieval() -> None:
    retriever = BM25Retriever.from_documents(CHINESE, k=3)
    assert ids(retriever.invoke("光伏"))[0] == "pv"
    assert ids(retriever.invoke("风力发电"))[0] == "wind-zh"
    assert ids(retriever.invoke("河流上的水力发电站"))[0] == "hydro"


def test_mixed_language_corpus() -> None:
    retriever = BM25Retriever.from_documents(ENGLISH + CHINESE, k=2)
    assert ids(retriever.invoke("solar 光伏发电 panels")) == ["solar", "pv"]
    assert ids(retriever.invoke("太阳能 sunlight")) == ["pv", "solar"]


def test_scores_are_higher_is_better_and_sorted() -> None:
    results = BM25Retriever.from_documents(ENGLISH, k=4).invoke("solar energy")
    scores = [document.metadata["score"] for document in results]
    assert ids(results)[0] == "solar-farm"  # three "solar" and one "energy"
    assert scores == sorted(scores, reverse=True)
    assert all(score > 0 for score in scores)
    assert scores[0] > scores[-1]


def test_k_default_and_at_invoke_time() -> None:
    retriever = BM25Retriever.from_documents(ENGLISH, k=1)
    assert len(retriever.invoke("solar energy day")) == 1
    assert len(retriever.invoke("solar energy day", k=3)) == 3
    assert len(retriever.invoke("solar energy day", k=100)) == 4  # capped at the corpus
    with pytest.raises(ValueError, match="k must be positive"):
        retriever.invoke("solar", k=0)
    with pytest.raises(TypeError, match="k must be an int"):
        retriever.invoke("solar", k="3")
    with pytest.raises(ValueError, match="k"):
        BM25Retriever.from_documents(ENGLISH, k=-1)


def test_documents_are_copied_not_mutated_and_ids_preserved() -> None:
    documents = [*ENGLISH, Document("solar without an id", metadata={"source": "x"})]
    snapshot = copy.deepcopy(documents)
    retriever = BM25Retriever.from_documents(documents, k=5)
    results = retriever.invoke("solar")
    assert documents == snapshot
    assert all("score" not in document.metadata for document in retriever.documents)
    assert all(result is not original for result in results for original in documents)
    by_id = {document.id: document for document in results}
    assert by_id["solar"].metadata == {"n": 1, "score": by_id["solar"].metadata["score"]}
    unnamed = documents[-1]
    assert document_id(unnamed) in by_id  # a content hash, the id the vector stores use
    assert unnamed.id is None


def test_from_texts_takes_texts_metadatas_and_ids_as_langchains_does() -> None:
    texts = [document.page_content for document in ENGLISH]
    metadatas = [document.metadata for document in ENGLISH]
    from_texts = BM25Retriever.from_texts(texts, metadatas, ids(ENGLISH), k=2)
    assert from_texts.invoke("solar") == BM25Retriever.from_documents(ENGLISH, k=2).invoke("solar")
    assert [d.metadata for d in BM25Retriever.from_texts(texts).documents] == [{}] * len(texts)
    with pytest.raises(ValueError, match="metadatas and ids: one per text if given; got 1 meta"):
        BM25Retriever.from_texts(texts, [{"n": 1}])
    with pytest.raises(ValueError, match="got 0 metadatas and 4 ids for 4 texts"):
        BM25Retriever.from_texts(texts, [])
    with pytest.raises(TypeError, match="texts must be a list of str, not one str"):
        BM25Retriever.from_texts("one text")


def test_empty_corpus_is_refused() -> None:
    with pytest.raises(ValueError, match="documents"):
        BM25Retriever.from_documents([])


# ---------------------------------------------------------------------------------- batching


def test_batch_scores_only_the_queries_with_known_terms() -> None:
    retriever = BM25Retriever.from_documents(ENGLISH + CHINESE, k=2)
    singles = [retriever.invoke(query) for query in ("solar", "光伏", "wind")]
    scored: list[list[int]] = []
    original = retriever.index.get_scores_from_ids
    retriever.index.get_scores_from_ids = lambda ids: scored.append(ids) or original(ids)
    counter = RunCounter()
    batched = retriever.batch(["solar", "光伏", "wind", "zzz"], {"callbacks": [counter]})
    assert len(scored) == 3  # the query without known terms needs no scoring
    assert batched == [*singles, []]
    assert counter.starts == ["solar", "光伏", "wind", "zzz"]
    assert counter.ends == 4


class RunRecorder(BaseCallbackHandler):
    """Records each retriever run's query, ids, tags and metadata."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []

    def on_retriever_start(self, serialized: Any, query: str, **kwargs: Any) -> None:
        self.runs.append({"query": query, **kwargs})


def test_batch_reports_one_run_per_query_with_the_configs_tags_and_metadata() -> None:
    # one config for the batch is configured once; every query still gets a run of its own
    retriever = BM25Retriever.from_documents(ENGLISH, k=1)
    recorder = RunRecorder()
    first_run = uuid.uuid4()
    config = {
        "callbacks": [recorder],
        "tags": ["mine"],
        "metadata": {"user": "u1"},
        "run_name": "keyword search",
        "run_id": first_run,
    }
    with pytest.warns(RuntimeWarning, match="first element"):  # LangChain's rule for run_id
        retriever.batch(["solar", "wind"], config)
    assert [run["query"] for run in recorder.runs] == ["solar", "wind"]
    assert recorder.runs[0]["run_id"] == first_run
    assert len({run["run_id"] for run in recorder.runs}) == 2
    assert all(run["name"] == "keyword search" for run in recorder.runs)
    assert all("mine" in run["tags"] and run["metadata"]["user"] == "u1" for run in recorder.runs)
    # a list (or any sequence) of configs: each query's own
    for configs in (list, tuple):
        recorder.runs.clear()
        retriever.batch(
            ["solar", "wind"],
            configs({"callbacks": [recorder], "tags": [tag]} for tag in ("a", "b")),  # type: ignore[arg-type]
        )
        assert [("a" in run["tags"], "b" in run["tags"]) for run in recorder.runs] == [
            (True, False),
            (False, True),
        ]


def test_batch_honours_k_and_map_uses_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    retriever = BM25Retriever.from_documents(ENGLISH, k=1)
    assert [len(result) for result in retriever.batch(["solar day", "day"], k=2)] == [2, 2]
    calls: list[list[str]] = []
    original = BM25Retriever._retrieve_many

    def counting(self: BM25Retriever, queries: list[str], *args: Any) -> Any:
        calls.append(queries)
        return original(self, queries, *args)

    monkeypatch.setattr(BM25Retriever, "_retrieve_many", counting)
    assert ids(retriever.map().invoke(["solar", "wind"])[1]) == ["wind"]
    assert calls == [["solar", "wind"]]
    with pytest.raises(TypeError, match="unexpected keyword"):
        retriever.batch(["solar"], top=3)


async def test_async_paths_match_sync() -> None:
    retriever = BM25Retriever.from_documents(ENGLISH + CHINESE, k=2)
    assert await retriever.ainvoke("光伏发电", k=1) == retriever.invoke("光伏发电", k=1)
    assert await retriever.abatch(["solar", "wind"]) == retriever.batch(["solar", "wind"])


# ---------------------------------------------------------------------------------- persistence


@pytest.mark.parametrize("method", ["lucene", "bm25+"])
def test_save_load_roundtrip_uses_json_and_no_pickle(tmp_path: Path, method: str) -> None:
    import bm25s
    import numpy as np

    retriever = BM25Retriever.from_documents(ENGLISH + CHINESE, k=3, stem=True, method=method)
    retriever.save(tmp_path / "bm25")
    names = {path.name for path in (tmp_path / "bm25").iterdir()}
    assert "documents.json" in names and "retriever.json" in names
    assert not any(name.endswith((".pkl", ".pickle")) for name in names)
    stored = json.loads((tmp_path / "bm25" / "documents.json").read_text("utf-8"))
    assert stored["ids"] == ids(retriever.documents)

    loaded = BM25Retriever.load(tmp_path / "bm25")
    for query in ("solar energy", "光伏", "running"):
        assert loaded.invoke(query) == retriever.invoke(query)
    assert BM25Retriever.load(tmp_path / "bm25", k=1).k == 1
    plain = bm25s.BM25.load(tmp_path / "bm25")  # the kit reads each file once, as bm25s does
    for name in ("k1", "b", "delta", "method", "idf_method", "dtype", "vocab_dict"):
        assert getattr(loaded.index, name) == getattr(plain, name)
    for name in ("data", "indices", "indptr"):
        np.testing.assert_array_equal(loaded.index.scores[name], plain.scores[name])
    np.testing.assert_array_equal(loaded.index.nonoccurrence_array, plain.nonoccurrence_array)


def test_load_missing_directory_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match="nowhere"):
        BM25Retriever.load(missing)


def test_load_detects_inconsistent_directory(tmp_path: Path) -> None:
    BM25Retriever.from_documents(ENGLISH).save(tmp_path)
    documents_file = tmp_path / "documents.json"
    columns = json.loads(documents_file.read_text())
    documents_file.write_text(json.dumps({name: column[:2] for name, column in columns.items()}))
    with pytest.raises(ValueError, match="inconsistent"):
        BM25Retriever.load(tmp_path)
    documents_file.write_text("{not json", "utf-8")
    with pytest.raises(ValueError, match="not valid JSON"):
        BM25Retriever.load(tmp_path)


def test_save_refuses_metadata_that_is_not_json(tmp_path: Path) -> None:
    retriever = BM25Retriever.from_documents([Document("x", metadata={"bad": object()})])
    with pytest.raises(ValueError, match="documents: metadata must be JSON data"):
        retriever.save(tmp_path)


def test_a_format_1_index_still_loads_and_a_loaded_index_saves_again(tmp_path: Path) -> None:
    retriever = BM25Retriever.from_documents(ENGLISH + CHINESE, k=3)
    retriever.save(tmp_path / "old")
    entries = [
        {"id": document.id, "page_content": document.page_content, "metadata": document.metadata}
        for document in retriever.documents
    ]
    (tmp_path / "old" / "documents.json").write_text(json.dumps(entries), "utf-8")
    loaded = BM25Retriever.load(tmp_path / "old")
    loaded.save(tmp_path / "again")
    again = BM25Retriever.load(tmp_path / "again")
    for query in ("solar energy", "光伏", "running"):
        assert loaded.invoke(query) == again.invoke(query) == retriever.invoke(query)
    assert list(again.documents) == list(retriever.documents)


def test_the_numba_backend_ranks_as_numpy_does() -> None:
    pytest.importorskip("numba")
    documents = ENGLISH + CHINESE
    numpy_side = BM25Retriever.from_documents(documents, k=3)
    numba_side = BM25Retriever.from_documents(documents, k=3, backend="numba")
    assert numba_side.index.backend == "numba" and numpy_side.index.backend == "numpy"
    for query in ("solar energy", "光伏", "running wind"):
        assert numba_side.invoke(query) == numpy_side.invoke(query)


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
def test_scores_equal_a_plain_bm25s_index_and_an_update_equals_a_rebuild(method: str) -> None:
    import bm25s

    documents = ENGLISH + CHINESE
    retriever = BM25Retriever.from_documents(documents, k=7, method=method)
    plain = bm25s.BM25(method=method)
    plain.index([tokenize(document.page_content) for document in documents], show_progress=False)
    for query in ("solar energy", "光伏发电", "running wind turbines"):
        found, scores = plain.retrieve([tokenize(query)], k=7, show_progress=False)
        expected = [
            (documents[int(i)].id, float(s))
            for i, s in zip(found[0], scores[0], strict=True)
            if s > 0
        ]
        got = [(document.id, document.metadata["score"]) for document in retriever.invoke(query)]
        assert got == expected
    added = Document("wind power from offshore turbines", id="offshore")
    updated = retriever.updated([5, added, 0, 3, 6])
    rebuilt = BM25Retriever.from_documents(
        [documents[5], added, *documents[0:7:3]], k=7, method=method
    )
    assert list(updated.documents) == list(rebuilt.documents)
    for query in ("solar energy", "光伏发电", "wind turbines", "battery"):
        assert updated.invoke(query) == rebuilt.invoke(query)
    for wrong in ([0, 0], [len(documents)], [-1]):
        with pytest.raises(ValueError, match="an int must be a position in this retriever, once"):
            retriever.updated(wrong)


@pytest.mark.parametrize("method", ["lucene", "bm25l"])
def test_a_large_sparse_corpus_ranks_as_bm25s_retrieve_does(method: str) -> None:
    """Most documents match no term (the kit's top-k then skips them): same hits as bm25s."""
    import bm25s

    generator = random.Random(0)
    words = [f"w{n}" for n in range(400)]
    texts = [" ".join(generator.choices(words, k=generator.randint(3, 12))) for _ in range(3000)]
    documents = [Document(text, id=str(n)) for n, text in enumerate(texts)]
    retriever = BM25Retriever.from_documents(documents, method=method)
    plain = bm25s.BM25(method=method)
    plain.index([tokenize(text) for text in texts], show_progress=False)
    for query, k in (("w1", 10), ("w1", 200), ("w7 w300 w399", 50), ("w2 w2 w3", 3000)):
        found, scores = plain.retrieve([tokenize(query)], k=k, show_progress=False)
        expected = [(str(int(i)), float(s)) for i, s in zip(*found, *scores, strict=True) if s > 0]
        hits = [(hit.id, hit.metadata["score"]) for hit in retriever.invoke(query, k=k)]
        assert [score for _, score in hits] == [score for _, score in expected]
        assert all(
            hit == want or [s for _, s in expected].count(want[1]) > 1  # ties in either order
            for hit, want in zip(hits, expected, strict=True)
        )
        assert len({identifier for identifier, _ in hits}) == len(hits)
        full = plain.get_scores(tokenize(query))
        assert all(full[int(identifier)] == score for identifier, score in hits)


def test_an_update_tokenises_only_new_documents_even_after_a_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    from rag_fusion_chain.retrievers import bm25

    BM25Retriever.from_documents(ENGLISH).save(tmp_path)
    loaded = BM25Retriever.load(tmp_path)
    tokenized: list[str] = []
    monkeypatch.setattr(
        bm25,
        "tokenize",
        lambda text, **options: tokenized.append(text) or tokenize(text, **options),
    )
    updated = loaded.updated([0, Document("solar roofs", id="roof"), 2])
    assert tokenized == ["solar roofs"]
    assert [document.id for document in updated.invoke("solar")] == ["roof", "solar"]
    np.save(tmp_path / "counts.csc.index.npy", np.ones(3, dtype=np.int32))
    with pytest.raises(ValueError, match="corrupt or incomplete .* is not one term count a score"):
        BM25Retriever.load(tmp_path)
    (tmp_path / "counts.csc.index.npy").unlink()  # saved before counts were kept: all tokenised
    tokenized.clear()
    BM25Retriever.load(tmp_path).updated([0, Document("solar roofs", id="roof")])
    assert sorted(tokenized) == sorted([ENGLISH[0].page_content, "solar roofs"])


class _ClaimsTooMany(list):  # type: ignore[type-arg]
    """A document list reporting more documents than a posting can address."""

    def __len__(self) -> int:
        return 2**31


def test_an_index_of_more_documents_than_a_posting_can_address_is_refused() -> None:
    retriever = BM25Retriever.from_documents([Document("solar power", id="1")])
    with pytest.raises(ValueError, match=r"documents: at most 2147483647 per index"):
        retriever.updated(_ClaimsTooMany([0]))
