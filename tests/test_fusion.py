"""Fusion: hand-computed examples, contracts (identity, copies, weights) and properties."""

from __future__ import annotations

import asyncio
import copy
import inspect
import math
import pickle
import uuid
import warnings
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.load import dumps, loads
from langchain_core.runnables import ConfigurableField, RunnableLambda
from langchain_core.tracers import langchain as langchain_tracer
from langchain_core.tracers.context import collect_runs
from langsmith import Client
from langsmith import utils as langsmith_utils

from rag_fusion_chain import fusion
from rag_fusion_chain.fusion import (
    DistBasedScoreFusion,
    RankedList,
    ReciprocalRankFusion,
    RelativeScoreFusion,
    UniqueUnion,
    document_id,
)
from tests.langsmith_recorder import LangSmithRecorder


def doc(text: str, score: float | None = None, **metadata: object) -> Document:
    if score is not None:
        metadata["score"] = score
    return Document(page_content=text, metadata=metadata)


def texts(documents: list[Document]) -> list[str]:
    return [document.page_content for document in documents]


# ---------------------------------------------------------------- reciprocal rank fusion


def test_rrf_hand_computed_two_lists() -> None:
    a, b, c = doc("A"), doc("B"), doc("C")
    fused = ReciprocalRankFusion(rank_constant=60, with_scores=True).invoke([[a, b, c], [b, a, c]])
    scores = {document.page_content: score for document, score in fused}
    assert scores["A"] == pytest.approx(1 / 61 + 1 / 62)
    assert scores["B"] == pytest.approx(1 / 62 + 1 / 61)
    assert scores["C"] == pytest.approx(2 / 63)
    # A and B tie; A appeared first (list 0, position 0).
    assert [document.page_content for document, _ in fused] == ["A", "B", "C"]


def test_rrf_rank_start_zero_reproduces_tutorial_formula() -> None:
    a, b, c = doc("A"), doc("B"), doc("C")
    lists = [[a, b, c], [c, a]]
    fused = ReciprocalRankFusion(rank_constant=60, rank_start=0, with_scores=True).invoke(lists)
    scores = {document.page_content: score for document, score in fused}
    # Tutorial: fused_scores[doc] += 1 / (rank + k) with enumerate() ranks starting at 0.
    assert scores == pytest.approx({"A": 1 / 60 + 1 / 61, "B": 1 / 61, "C": 1 / 62 + 1 / 60})
    assert texts(ReciprocalRankFusion(rank_start=0).invoke(lists)) == ["A", "C", "B"]


def test_rrf_terms_kept_between_calls_change_no_score() -> None:
    """RRF keeps each list shape's terms for later calls; whatever was kept before, the scores are
    those computed afresh: a shape seen before, weights of equal value and another type, a zero
    weight of either sign (0.0 and -0.0 are one key) and a list too long to keep."""
    from rag_fusion_chain.fusion import algorithms

    only_first, shared = doc("only in list 0"), doc("in both")
    long_list = [shared] + [doc(f"long {rank}") for rank in range(1, 10_001)]
    one, two = Fraction(1), Fraction(2)
    for weights in ([1.0, 2.0], [1, 2], [one, two], [0.0, 1.0], [-0.0, 1.0], [0.0, 1.0], [0.5, 1]):
        for lists in ([[only_first, shared], [shared]], [[only_first, shared], long_list]):
            scores, documents = fusion.reciprocal_rank_scores(lists, weights, rank_constant=60)
            fresh = [weights[0] / 61, weights[0] / 62 + weights[1] / 61]
            assert texts(documents[:2]) == ["only in list 0", "in both"]
            assert scores[:2] == fresh and type(scores[0]) is type(fresh[0])
            assert math.copysign(1, scores[0]) == math.copysign(1, fresh[0])
            if len(lists[1]) > 1:
                assert scores[-1] == weights[1] / (61 + 10_000) and len(scores) == 10_002
    kept = algorithms._terms.cache_info()
    fusion.reciprocal_rank_scores([long_list], [3.0])  # a new shape, too long to keep
    assert algorithms._terms.cache_info().currsize == kept.currsize <= kept.maxsize


def test_rrf_weights_change_the_winner() -> None:
    a, b = doc("A"), doc("B")
    fused = ReciprocalRankFusion(weights=[1.0, 3.0], with_scores=True).invoke([[a, b], [b, a]])
    assert fused[0][0].page_content == "B"
    assert fused[0][1] == pytest.approx(1 / 62 + 3 / 61)


def test_fusion_score_written_on_copies_and_inputs_untouched() -> None:
    lists = [[doc("A", 0.9), doc("B", 0.5)], [doc("B", 0.8)]]
    snapshot = copy.deepcopy(lists)
    fused = fusion.reciprocal_rank_fusion.invoke(lists)
    assert lists == snapshot
    assert all("fusion_score" in document.metadata for document in fused)
    assert all(document is not original for document in fused for original in lists[0])


def test_top_n_cuts_and_is_configurable_per_call() -> None:
    lists = [[doc(str(index)) for index in range(10)]]
    assert len(ReciprocalRankFusion(top_n=3).invoke(lists)) == 3
    configurable = ReciprocalRankFusion().configurable_fields(top_n=ConfigurableField(id="top_n"))
    assert len(configurable.invoke(lists, config={"configurable": {"top_n": 4}})) == 4


@pytest.mark.filterwarnings("ignore:ranked list")
def test_settings_given_per_call_are_honoured_or_refused_by_name() -> None:
    # Issue 10: .bind(top_n=3) used to return every document.
    lists = [[doc(str(index)) for index in range(11)], [doc("10"), doc("9")]]
    for runnable in (
        fusion.reciprocal_rank_fusion,
        fusion.relative_score_fusion,
        fusion.dist_based_score_fusion,
        fusion.unique_union,
    ):
        assert len(runnable.bind(top_n=3).invoke(lists)) == 3
        assert len(runnable.invoke(lists, top_n=2)) == 2
        assert len(asyncio.run(runnable.ainvoke(lists, top_n=4))) == 4
        assert [len(result) for result in runnable.batch([lists, lists], top_n=1)] == [1, 1]
        with pytest.raises(TypeError, match="'top_k'"):
            runnable.invoke(lists, top_k=3)
        with pytest.raises(ValueError, match="top_n"):
            runnable.invoke(lists, top_n=0)
    weighted = fusion.reciprocal_rank_fusion.bind(weights=[0.0, 1.0]).invoke(lists)
    assert texts(weighted)[:2] == ["10", "9"]
    scores_k1 = ReciprocalRankFusion(with_scores=True).bind(rank_constant=1).invoke([[doc("A")]])
    assert scores_k1[0][1] == pytest.approx(1 / 2)
    with pytest.raises(TypeError, match="'k'"):
        fusion.relative_score_fusion.invoke(lists, k=1)


def test_duplicates_inside_a_list_count_once_at_best_rank() -> None:
    a, b = doc("A"), doc("B")
    fused = ReciprocalRankFusion(with_scores=True).invoke([[a, b, a]])
    assert [(document.page_content, score) for document, score in fused] == [
        ("A", pytest.approx(1 / 61)),
        ("B", pytest.approx(1 / 62)),
    ]


# ---------------------------------------------------------------- identity


def test_same_chunk_from_two_retrievers_merges_despite_different_scores() -> None:
    from_bm25 = doc("chunk text", 12.5, source="a.pdf", page=1)
    from_vectors = doc("chunk text", 0.83, source="a.pdf", page=1)
    fused = fusion.reciprocal_rank_fusion.invoke([[from_bm25], [from_vectors]])
    assert len(fused) == 1


def test_equal_text_from_two_stores_merges_keeping_the_first_appearance() -> None:
    # Identity contract (issue 10): the passage text, whatever ids or metadata each store gives it.
    # Before, equal text with other metadata (or another Document.id) stayed apart: the defect.
    first = Document("same", id="uuid-from-store-a", metadata={"source": "a"})
    second = Document("same", metadata={"source": "b", "score": 0.3})
    fused = fusion.reciprocal_rank_fusion.invoke([[first], [second]])
    assert len(fused) == 1
    assert fused[0].id == "uuid-from-store-a" and fused[0].metadata["source"] == "a"


def test_id_key_identifies_by_metadata_or_document_id_and_falls_back_to_text() -> None:
    by_id = [[Document("text one", id="x")], [Document("text two", id="x")]]
    assert len(fusion.reciprocal_rank_fusion.invoke(by_id)) == 2  # default: by text
    assert len(ReciprocalRankFusion(id_key=fusion.DOCUMENT_ID).invoke(by_id)) == 1
    keyed = [[doc("v1", chunk="c1")], [doc("v2", chunk="c1")], [doc("v1")], [doc("c1")]]
    # "v1" and "v2" share chunk c1; the key-less "v1" is identified by its text, and the text
    # "c1" never equals the key value "c1".
    assert texts(ReciprocalRankFusion(id_key="chunk").invoke(keyed)) == ["v1", "v1", "c1"]
    assert len(ReciprocalRankFusion().invoke(keyed)) == 3
    assert document_id(Document("t", id="x")) == "x"
    assert document_id(doc("t", 0.1, a=1)) == document_id(doc("t", 0.9, a=1))


def test_unhashable_metadata_is_fine() -> None:
    lists = [
        [doc("A", tags=["x", "y"], nested={"k": [1, 2]})],
        [doc("A", nested={"k": [1, 2]}, tags=["x", "y"])],
    ]
    assert len(fusion.reciprocal_rank_fusion.invoke(lists)) == 1


# ---------------------------------------------------------------- score-based fusion


def test_relative_score_fusion_hand_computed() -> None:
    # list 1 scores 10, 6, 2 -> min-max 1.0, 0.5, 0.0; list 2 scores 0.9, 0.3 -> 1.0, 0.0
    list_one = [doc("A", 10), doc("B", 6), doc("C", 2)]
    list_two = [doc("B", 0.9), doc("D", 0.3)]
    fused = RelativeScoreFusion(with_scores=True).invoke([list_one, list_two])
    scores = {document.page_content: score for document, score in fused}
    assert scores == pytest.approx({"A": 0.5, "B": 0.75, "C": 0.0, "D": 0.0})
    assert texts([document for document, _ in fused]) == ["B", "A", "C", "D"]


def test_relative_score_fusion_weights_scale_each_list() -> None:
    list_one = [doc("A", 10), doc("B", 2)]
    list_two = [doc("B", 0.9), doc("A", 0.3)]
    fused = RelativeScoreFusion(weights=[0.2, 0.8], with_scores=True).invoke([list_one, list_two])
    scores = {document.page_content: score for document, score in fused}
    assert scores == pytest.approx({"A": 0.2 / 2, "B": 0.8 / 2})


@pytest.mark.parametrize("runnable", [RelativeScoreFusion, DistBasedScoreFusion])
@pytest.mark.parametrize(("value", "count"), [(0.7, 7), (0.1, 3), (12.345, 10), (0.7, 3)])
def test_a_constant_list_scores_one_whatever_its_value_and_length(
    runnable: type[fusion.BaseFusion], value: float, count: int
) -> None:
    # Regression (issue 10): float noise made sigma tiny but not zero, so dist-based fusion gave
    # 1/3, 2/3 or 1 depending on the value; the rule is now exact (min == max).
    ranked = [doc(f"d{index}", value) for index in range(count)]
    fused = runnable(with_scores=True).invoke([ranked])
    assert [score for _, score in fused] == [1.0] * count
    assert texts([document for document, _ in fused]) == [f"d{index}" for index in range(count)]


def test_all_equal_scores_give_one_if_positive_else_zero() -> None:
    fused = RelativeScoreFusion(with_scores=True).invoke(
        [[doc("A", 3), doc("B", 3)], [doc("C", -1)]]
    )
    scores = {document.page_content: score for document, score in fused}
    assert scores == pytest.approx({"A": 0.5, "B": 0.5, "C": 0.0})


def test_dist_based_score_fusion_hand_computed() -> None:
    # scores 1, 2, 3: mean 2, population sigma sqrt(2/3); bounds 2 -/+ 3 sigma
    sigma = math.sqrt(2 / 3)
    low, high = 2 - 3 * sigma, 2 + 3 * sigma
    fused = DistBasedScoreFusion(with_scores=True).invoke([[doc("A", 3), doc("B", 2), doc("C", 1)]])
    scores = {document.page_content: score for document, score in fused}
    assert scores == pytest.approx(
        {"A": (3 - low) / (high - low), "B": 0.5, "C": (1 - low) / (high - low)}
    )


def test_list_without_scores_falls_back_to_ranks_with_warning() -> None:
    with pytest.warns(UserWarning, match="rank-derived") as warned:
        fused = RelativeScoreFusion(with_scores=True).invoke([[doc("A"), doc("B"), doc("C")]])
    assert [w.filename for w in warned] == [__file__]  # the caller's .invoke, not the kit
    assert [(document.page_content, score) for document, score in fused] == [
        ("A", pytest.approx(1.0)),
        ("B", pytest.approx(0.5)),
        ("C", pytest.approx(0.0)),
    ]


@pytest.mark.parametrize("bad", [None, float("nan"), "high"])
def test_bad_scores_never_crash_and_warn(bad: object) -> None:
    lists = [[doc("A", 0.9), Document("B", metadata={"score": bad}), doc("C", 0.1)]]
    with pytest.warns(UserWarning, match="1 document with a missing or non-numeric"):
        fused = DistBasedScoreFusion(with_scores=True).invoke(lists)
    assert texts([document for document, _ in fused]) == ["A", "B", "C"]
    assert all(math.isfinite(score) for _, score in fused)


@pytest.mark.parametrize("runnable", [RelativeScoreFusion, DistBasedScoreFusion])
@pytest.mark.parametrize("bad", [None, float("nan")])
@pytest.mark.parametrize("real", [0.9, -0.5])
def test_a_missing_score_beside_one_real_score_counts_as_the_lowest_never_above_it(
    runnable: type[fusion.BaseFusion], bad: object, real: float
) -> None:
    # [nan, 0.9] scored both 1.0 (a constant list), the missing one first by its position
    lists = [[Document("missing", metadata={"score": bad}), doc("real", real), doc("too", real)]]
    for ranked in (lists[0][:2], lists[0]):  # one real score, or two equal ones
        with pytest.warns(UserWarning, match="missing or non-numeric"):
            pairs = runnable(with_scores=True).invoke([ranked])
        scores = {document.page_content: score for document, score in pairs}
        assert scores["missing"] == 0.0  # the bottom of [0, 1], as the lowest of a list
        assert scores["real"] == (1.0 if real > 0 else 0.0)  # as alone: a constant list
    other = [doc("real", 0.2), doc("other", 0.1)]
    with pytest.warns(UserWarning, match="missing or non-numeric"):
        fused = runnable().invoke([lists[0][:2], other])
    assert texts(fused)[0] == "real"


@pytest.mark.parametrize("runnable", [RelativeScoreFusion, DistBasedScoreFusion])
@pytest.mark.parametrize("huge", [10**400, float("inf"), 1e308])
def test_huge_scores_count_as_infinite_rank_first_and_warn(
    runnable: type[fusion.BaseFusion], huge: float
) -> None:
    # Issue 13: a Python int of 10**400 raised OverflowError; it now ranks first, with a warning
    # (1e308 is finite: no warning, same order).
    ranked = [doc("A", 0.9), doc("B", huge), doc("C", -huge), doc("D", 0.1)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fused = runnable(with_scores=True).invoke([ranked])
    assert texts([document for document, _ in fused]) == ["B", "A", "D", "C"]
    assert all(math.isfinite(score) for _, score in fused)
    assert any("infinite" in str(w.message) for w in caught) == (huge != 1e308)


def test_configurable_score_key() -> None:
    lists = [
        [Document("A", metadata={"relevance": 1.0}), Document("B", metadata={"relevance": 0.0})]
    ]
    assert texts(RelativeScoreFusion(score_key="relevance").invoke(lists)) == ["A", "B"]


# ---------------------------------------------------------------- unique union and input shapes


def test_unique_union_first_seen_order_and_votes() -> None:
    fused = UniqueUnion(with_scores=True).invoke([[doc("B"), doc("A")], [doc("A"), doc("C")]])
    assert [(document.page_content, score) for document, score in fused] == [
        ("B", 1.0),
        ("A", 2.0),
        ("C", 1.0),
    ]


def test_nested_query_by_retriever_input_with_per_retriever_weights() -> None:
    nested = [
        [[doc("A"), doc("B")], [doc("B"), doc("C")]],  # query 1: retriever 1, retriever 2
        [[doc("A")], [doc("C")]],  # query 2
    ]
    fused = ReciprocalRankFusion(weights=[1.0, 0.0], with_scores=True).invoke(nested)
    scores = {document.page_content: score for document, score in fused}
    assert scores["A"] == pytest.approx(2 / 61)
    assert scores["C"] == pytest.approx(0.0)


def test_ranked_list_weight_is_used_without_explicit_weights() -> None:
    lists = [RankedList([doc("A")], weight=0.1), RankedList([doc("B")], weight=2.0)]
    assert texts(fusion.reciprocal_rank_fusion.invoke(lists)) == ["B", "A"]


def test_empty_inputs() -> None:
    assert fusion.reciprocal_rank_fusion.invoke([]) == []
    assert fusion.relative_score_fusion.invoke([[], []]) == []


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ([1.0], "2 ranked lists"),
        ([1.0, -1.0], "non-negative"),
        ([0, 0], "all be zero"),
        ([1.0, float("nan")], "finite"),
    ],
)
def test_weights_are_validated(weights: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ReciprocalRankFusion(weights=weights).invoke([[doc("A")], [doc("B")]])


@pytest.mark.parametrize("weights", [[True, 1.0], [1.0, "2"]])
def test_weights_that_are_no_numbers_are_refused_not_converted(weights: list[object]) -> None:
    # pydantic made True 1.0 and "2" 2.0 before the check saw them (MultiRetriever refused both)
    with pytest.raises(TypeError, match="weights must be numbers"):
        ReciprocalRankFusion(weights=weights)
    with pytest.raises(TypeError, match="weights must be numbers"):
        fusion.reciprocal_rank_fusion.with_settings(weights=weights)


def test_numpy_scores_are_scores() -> None:
    # a retriever's numpy float32 scores were read as missing (a warning, the list's lowest)
    numpy = pytest.importorskip("numpy")
    ranked = [doc("low", numpy.float32(0.2)), doc("high", numpy.float32(0.9))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pairs = RelativeScoreFusion(with_scores=True).invoke([ranked])
    assert [(d.page_content, score) for d, score in pairs] == [("high", 1.0), ("low", 0.0)]


@pytest.mark.parametrize("bad_input", ["text", [doc("A")], [["not a document"]], None])
def test_bad_input_types_raise_type_error(bad_input: object) -> None:
    with pytest.raises(TypeError, match="fusion input"):
        fusion.reciprocal_rank_fusion.invoke(bad_input)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "arguments", [{"top_n": 0}, {"rank_constant": -1}, {"rank_constant": 0, "rank_start": 0}]
)
def test_parameters_are_validated(arguments: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ReciprocalRankFusion(**arguments)


def test_the_rrf_constant_is_rank_constant_not_k() -> None:
    with pytest.raises(TypeError, match="rank_constant"):
        ReciprocalRankFusion(k=30)
    with pytest.raises(TypeError, match="'k'"):
        fusion.reciprocal_rank_fusion.invoke([[doc("A")]], k=30)
    assert ReciprocalRankFusion(rank_constant=30).rank_constant == 30


def test_every_call_style_and_run_name() -> None:
    lists = [[doc("A"), doc("B")], [doc("B")]]
    runnable = fusion.reciprocal_rank_fusion
    expected = texts(runnable.invoke(lists))
    assert expected == ["B", "A"]
    assert texts(asyncio.run(runnable.ainvoke(lists))) == expected
    assert [texts(result) for result in runnable.batch([lists, lists])] == [expected, expected]
    assert [texts(result) for result in asyncio.run(runnable.abatch([lists]))] == [expected]
    assert texts(next(iter(runnable.stream(lists)))) == expected

    async def first_chunk() -> list[Document]:
        async for chunk in runnable.astream(lists):
            return chunk
        raise AssertionError("no chunk")

    assert texts(asyncio.run(first_chunk())) == expected
    assert runnable.get_name() == "fuse"


# ---------------------------------------------------------------- properties

ranked_lists_strategy = st.lists(
    st.lists(
        st.builds(
            lambda text, score: doc(text, score),
            st.sampled_from(list("ABCDEFGHIJ")),
            st.one_of(st.none(), st.floats(-100, 100), st.just(float("nan"))),
        ),
        max_size=8,
    ),
    max_size=5,
)
fusions = [
    ReciprocalRankFusion(with_scores=True),
    RelativeScoreFusion(with_scores=True),
    DistBasedScoreFusion(with_scores=True),
    UniqueUnion(with_scores=True),
]


@settings(max_examples=60, deadline=None)
@given(ranked_lists_strategy, st.sampled_from(fusions))
def test_property_nothing_lost_nothing_mutated(
    lists: list[list[Document]], runnable: fusion.BaseFusion
) -> None:
    snapshot = copy.deepcopy(lists)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fused = runnable.invoke(lists)
    assert lists == snapshot
    assert sorted({d.page_content for ranked in lists for d in ranked}) == sorted(
        document.page_content for document, _ in fused
    )
    assert all(math.isfinite(score) for _, score in fused)
    if not isinstance(runnable, UniqueUnion):
        scores = [score for _, score in fused]
        assert scores == sorted(scores, reverse=True)


@settings(max_examples=60, deadline=None)
@given(ranked_lists_strategy, st.sampled_from(fusions), st.randoms())
def test_property_list_order_irrelevant_when_unweighted(
    lists: list[list[Document]], runnable: fusion.BaseFusion, random: object
) -> None:
    shuffled = list(lists)
    random.shuffle(shuffled)  # type: ignore[attr-defined]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        original = {d.page_content: s for d, s in runnable.invoke(lists)}
        permuted = {d.page_content: s for d, s in runnable.invoke(shuffled)}
    assert original.keys() == permuted.keys()
    for key, score in original.items():
        assert permuted[key] == pytest.approx(score)


# ---------------------------------------------------------------- identity against an oracle

documents_with_collisions = st.builds(
    lambda text, source, document_id, score: Document(
        page_content=text,
        id=document_id,
        metadata={
            **({"source": source} if source else {}),
            **({"score": score} if score is not None else {}),
        },
    ),
    st.sampled_from(["alpha", "beta", "gamma", "a.pdf"]),
    st.sampled_from([None, "a.pdf", "b.pdf", "c.pdf"]),
    st.sampled_from([None, "uuid-1", "uuid-2", "alpha"]),
    st.one_of(st.none(), st.floats(0, 1)),
)


def oracle_identity(document: Document, id_key: str | None) -> tuple[str, object]:
    """The identity contract written out plainly: text, or the key's value when it is set."""
    if id_key is not None:
        value = document.id if id_key == fusion.DOCUMENT_ID else document.metadata.get(id_key)
        if value:
            return ("key", value)
    return ("text", document.page_content)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(documents_with_collisions, max_size=10), min_size=1, max_size=6),
    st.sampled_from([None, fusion.DOCUMENT_ID, "id", "source"]),
)
def test_property_identity_matches_the_oracle_and_outputs_are_distinct(
    lists: list[list[Document]], id_key: str | None
) -> None:
    """Equal texts with other ids and metadata, keys that equal some text, repeats within and
    across lists: no two outputs share an identity, each keeps its first appearance, and the
    scores are those of an RRF computed over the oracle's identity (the contract of issue 10;
    the former oracle, text plus metadata, described the old contract)."""
    expected: dict[tuple[str, object], float] = {}
    first: dict[tuple[str, object], Document] = {}
    for ranked in lists:
        best_rank: dict[tuple[str, object], int] = {}
        for rank, document in enumerate(ranked, start=1):
            identity = oracle_identity(document, id_key)
            best_rank.setdefault(identity, rank)
            first.setdefault(identity, document)
        for identity, rank in best_rank.items():
            expected[identity] = expected.get(identity, 0.0) + 1 / (60 + rank)
    fused = ReciprocalRankFusion(with_scores=True, id_key=id_key).invoke(lists)
    got = {oracle_identity(document, id_key): score for document, score in fused}
    assert len(got) == len(fused)
    assert got.keys() == expected.keys()
    for identity, score in expected.items():
        assert got[identity] == pytest.approx(score)
    for document, _ in fused:
        original = first[oracle_identity(document, id_key)]
        assert document.id == original.id and document.page_content == original.page_content
        assert {**original.metadata, "fusion_score": document.metadata["fusion_score"]} == (
            document.metadata
        )


def test_the_kits_content_hash_ids_group_as_before() -> None:
    """The kit's stores give each chunk its content hash as id, so grouping by text and by id
    agree for them: the same chunk from BM25 and from vectors still merges once."""
    chunks = [doc("alpha", source="a"), doc("beta", source="a"), doc("gamma", source="b")]
    hashed = [chunk.model_copy(update={"id": document_id(chunk)}) for chunk in chunks]
    keyword = [
        hashed[0].model_copy(update={"metadata": {**hashed[0].metadata, "score": 9.0}}),
        hashed[2],
    ]
    vectors = [hashed[1], hashed[0]]
    by_text = texts(fusion.reciprocal_rank_fusion.invoke([keyword, vectors]))
    by_id = texts(ReciprocalRankFusion(id_key=fusion.DOCUMENT_ID).invoke([keyword, vectors]))
    assert by_text == by_id == ["alpha", "beta", "gamma"]


def test_id_key_id_is_metadata_id_as_in_langchains_ensemble_retriever() -> None:
    """LangChain's own EnsembleRetriever test (id_key="id" over metadata ids, one document
    repeated across retrievers) ported: the same three documents, the same order, no duplicates."""
    from langchain_classic.retrievers import EnsembleRetriever

    first = [
        Document("a", metadata={"id": 1}),
        Document("b", metadata={"id": 2}),
        Document("c", metadata={"id": 3}),
    ]
    second = [Document("b", metadata={"id": 2}), Document("a", metadata={"id": 1})]
    # Same ids, other texts: LangChain merges by metadata["id"], so must the kit.
    third = [Document("a (revised)", metadata={"id": 1}), Document("d", metadata={"id": 4})]
    lists = [first, second, third]
    from langchain_core.runnables import RunnableLambda

    unused = [RunnableLambda(lambda query: []) for _ in lists]  # only its fusion is called
    ensemble = EnsembleRetriever(retrievers=unused, weights=[1.0] * len(lists), id_key="id")
    expected = [d.page_content for d in ensemble.weighted_reciprocal_rank(lists)]
    for fuse in (
        ReciprocalRankFusion(id_key="id"),
        fusion.reciprocal_rank_fusion.model_copy(update={"id_key": "id"}),
    ):
        fused = fuse.invoke(lists)
        assert texts(fused) == expected
        assert len({d.metadata["id"] for d in fused}) == len(fused)


def test_id_key_id_warns_when_documents_carry_only_document_ids() -> None:
    by_id = [[Document("text one", id="x")], [Document("text two", id="x")]]
    with pytest.warns(UserWarning, match="DOCUMENT_ID") as warned:
        assert len(ReciprocalRankFusion(id_key="id").invoke(by_id)) == 2
    assert [w.filename for w in warned] == [__file__]  # the caller's .invoke, not the kit


@pytest.mark.filterwarnings("ignore:The function `loads` is in beta")
def test_plain_copies_behave_as_documents_built_from_scratch() -> None:
    """A fused copy of a plain Document (made slot by slot, as pydantic's ``__copy__`` does) holds
    the very state ``__copy__`` plus assignment would give it, and behaves as a Document built
    from scratch in every way a caller can reach it; fails if pydantic's model state changes."""
    from pydantic import BaseModel

    from rag_fusion_chain.fusion import algorithms

    # the fast path is on in this environment, and its slots are pydantic's whole model state
    assert algorithms._PLAIN_DOCUMENT is Document
    assert BaseModel.__slots__ == algorithms._MODEL_SLOTS
    with_metadata = Document(page_content="a", metadata={"source": "s", "score": 2.0}, id="i")
    without_metadata = Document(page_content="b")
    built = Document.model_construct(page_content="c", metadata={"nested": {"x": [1]}})
    inputs = [with_metadata, without_metadata, built]
    snapshot = copy.deepcopy(inputs)
    fused = ReciprocalRankFusion(with_scores=True).invoke([inputs])
    for (copied, score), original in zip(fused, inputs, strict=True):
        metadata = {**original.metadata, "fusion_score": score}
        slow = original.__copy__()
        slow.metadata = metadata
        assert copied.__getstate__() == slow.__getstate__()
        expected = Document(page_content=original.page_content, metadata=metadata, id=original.id)
        assert type(copied) is Document and copied is not original
        assert copied == expected and repr(copied) == repr(expected) and copied.id == original.id
        assert copied.model_fields_set == original.model_fields_set | {"metadata"}
        assert copied.model_dump() == expected.model_dump()
        assert copied.model_dump(exclude_unset=True) == slow.model_dump(exclude_unset=True)
        assert copied.model_dump_json() == expected.model_dump_json()
        assert copied.to_json() == expected.to_json()
        assert loads(dumps(copied), allowed_objects=[Document]) == expected
        assert pickle.loads(pickle.dumps(copied)) == expected
        assert copy.copy(copied) == copy.deepcopy(copied) == copied.model_copy() == expected
        assert Document.model_validate(copied.model_dump()) == expected
        copied.metadata["note"] = "changed"  # its own metadata dict
        copied.id = "new"  # assignment as on any Document: recorded in its own fields set only
        assert copied.model_fields_set == original.model_fields_set | {"metadata", "id"}
        with pytest.raises(ValueError, match="no field"):
            copied.no_such_field = 1
    assert [d.model_dump() for d in inputs] == [d.model_dump() for d in snapshot]
    assert [d.model_fields_set for d in inputs] == [d.model_fields_set for d in snapshot]


def test_each_copy_owns_its_fields_set_as_model_copy_gives_it() -> None:
    """pydantic records an assignment by adding to the model's own fields set in place, so no
    copy may share that set with an input or another copy (equal sets included): assigning on
    one copy changes that copy alone, and each copy's set equals ``model_copy``'s through
    pickling and deep copies. Fails on a fields set shared, reused or taken from the input."""
    plain = [Document(f"text {i}", metadata={"score": i}) for i in range(6)]
    with_ids = [Document(f"text {i}", metadata={"score": 0.5}, id=f"i{i}") for i in range(4, 9)]
    lists = [plain, plain[::-1], with_ids]
    inputs = plain + with_ids
    before = [set(d.model_fields_set) for d in inputs]
    fused = ReciprocalRankFusion(with_scores=True).invoke(lists)
    first_seen: dict[str, Document] = {}
    for document in (d for ranked in lists for d in ranked):
        first_seen.setdefault(document.page_content, document)
    expected = [
        first_seen[d.page_content].model_copy(
            update={"metadata": {**first_seen[d.page_content].metadata, "fusion_score": score}}
        )
        for d, score in fused
    ]
    copies = [d for d, _ in fused]
    every_set = [d.model_fields_set for d in copies + inputs]
    assert len(set(map(id, every_set))) == len(every_set)  # no set is held twice
    for copied, slow in zip(copies, expected, strict=True):
        assert copied.model_fields_set == slow.model_fields_set
        assert copied.model_dump(exclude_unset=True) == slow.model_dump(exclude_unset=True)
        for clone in (pickle.loads(pickle.dumps(copied)), copy.deepcopy(copied)):
            assert clone.model_fields_set == slow.model_fields_set
            assert clone.model_dump(exclude_unset=True) == slow.model_dump(exclude_unset=True)
    for index, changed in enumerate(copies):  # one copy at a time: assign, compare all, undo
        changed.id = "assigned"
        for copied, slow in zip(copies, expected, strict=True):
            extra = {"id"} if copied is changed else set()
            assert copied.model_fields_set == slow.model_fields_set | extra
        changed.id = expected[index].id
        changed.model_fields_set.intersection_update(expected[index].model_fields_set)
    assert [d.model_fields_set for d in inputs] == before


def test_a_pydantic_with_other_model_slots_turns_the_fast_copy_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Imported under a pydantic whose models keep their state in other slots, the fusion still
    imports and copies through ``model_copy``."""
    import importlib

    from pydantic import BaseModel

    from rag_fusion_chain.fusion import algorithms

    monkeypatch.setattr(BaseModel, "__slots__", ("__dict__", "__pydantic_fields_set__"))
    try:
        assert importlib.reload(algorithms)._PLAIN_DOCUMENT is None
        (copied,) = fusion.reciprocal_rank_fusion.invoke([[doc("a", source="s")]])
        assert copied == Document("a", metadata={"source": "s", "fusion_score": 1 / 61})
    finally:
        monkeypatch.undo()
        assert importlib.reload(algorithms)._PLAIN_DOCUMENT is Document


@pytest.mark.parametrize("fast_path", [True, False])
def test_copies_keep_document_subclasses_and_leave_inputs_alone(
    fast_path: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subclass among the documents (here beside a plain one), or a pydantic whose model state
    the fast copy does not know (simulated), sends every copy through ``model_copy``: same output."""
    from rag_fusion_chain.fusion import algorithms

    class PageDocument(Document):
        page_number: int = 0

    if not fast_path:
        monkeypatch.setattr(algorithms, "_PLAIN_DOCUMENT", None)
    original = PageDocument(page_content="text", metadata={"score": 0.5}, page_number=7)
    plain = Document("plain", metadata={"score": 0.1}, id="p")
    copied, plain_copy = fusion.reciprocal_rank_fusion.invoke([[original, plain]])
    assert type(copied) is PageDocument and copied.page_number == 7
    assert copied.metadata["fusion_score"] == pytest.approx(1 / 61)
    assert plain_copy == Document("plain", metadata={"score": 0.1, "fusion_score": 1 / 62}, id="p")
    assert plain_copy is not plain and plain.metadata == {"score": 0.1}
    assert original.metadata == {"score": 0.5}
    copied.metadata["note"] = "changed"
    assert "note" not in original.metadata
    (alone,) = fusion.reciprocal_rank_fusion.invoke([[plain]])
    assert alone == Document("plain", metadata={"score": 0.1, "fusion_score": 1 / 61}, id="p")


# ---------------------------------------------------------------- callbacks


class RunRecorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, object, object]] = []

    def on_chain_start(self, serialized, inputs, *, run_id, **kwargs):  # type: ignore[no-untyped-def]
        self.events.append(("start", kwargs.get("name"), run_id))
        self.tags, self.metadata = kwargs.get("tags"), kwargs.get("metadata")

    def on_chain_end(self, outputs, *, run_id, **kwargs):  # type: ignore[no-untyped-def]
        self.events.append(("end", len(outputs), run_id))

    def on_chain_error(self, error, *, run_id, **kwargs):  # type: ignore[no-untyped-def]
        self.events.append(("error", type(error).__name__, run_id))


@pytest.mark.parametrize("call_style", ["invoke", "ainvoke"])
def test_fusion_reports_its_run_to_callbacks(call_style: str) -> None:
    recorder = RunRecorder()
    run_id = uuid.uuid4()
    config = {"callbacks": [recorder], "run_id": run_id, "tags": ["t"], "metadata": {"m": 1}}
    lists = [[doc("A"), doc("B")], [doc("B")]]
    runnable = fusion.reciprocal_rank_fusion
    if call_style == "invoke":
        runnable.invoke(lists, config)
    else:
        asyncio.run(runnable.ainvoke(lists, config))
    assert recorder.events == [("start", "fuse", run_id), ("end", 2, run_id)]
    assert recorder.tags == ["t"] and recorder.metadata == {"m": 1}

    failing = RunRecorder()
    with pytest.raises(TypeError):
        if call_style == "invoke":
            runnable.invoke("not lists", {"callbacks": [failing], "run_name": "my_fuse"})
        else:
            asyncio.run(
                runnable.ainvoke("not lists", {"callbacks": [failing], "run_name": "my_fuse"})
            )
    assert [event[:2] for event in failing.events] == [("start", "my_fuse"), ("error", "TypeError")]


@pytest.mark.parametrize(
    "source",
    [
        "config",
        "parent run",
        "collect_runs",
        "astream_events",
        "LANGCHAIN_TRACING_V2",
        "LANGSMITH_TRACING",
    ],
)
def test_the_fuse_run_reaches_handlers_from_every_source(
    source: str, monkeypatch: pytest.MonkeyPatch, langsmith_recorder: LangSmithRecorder
) -> None:
    """The fusion skips its run only when no handler would see it: a handler in the config, in a
    parent's context, from a context hook, or the tracer the environment switches on (its runs
    sent to a local LangSmith stand-in) still gets it."""
    lists = [[doc("A"), doc("B")], [doc("B")]]
    fuse = fusion.reciprocal_rank_fusion
    recorder = RunRecorder()
    if source == "config":
        fuse.invoke(lists, {"callbacks": [recorder]})
    elif source == "parent run":
        (RunnableLambda(lambda given: given) | fuse).invoke(lists, {"callbacks": [recorder]})
    elif source == "collect_runs":
        with collect_runs() as collector:
            fuse.invoke(lists)
        recorder.events = [("start", run.name, run.id) for run in collector.traced_runs]
    elif source == "astream_events":

        async def events() -> list[tuple[str, object, object]]:
            return [
                (event["event"].removeprefix("on_chain_"), event["name"], 0)
                async for event in fuse.astream_events(lists)
            ]

        recorder.events = asyncio.run(events())
    else:
        client = Client(api_url=langsmith_recorder.url, api_key="fake-recorder-key")
        monkeypatch.setattr(langchain_tracer, "get_client", lambda: client)
        monkeypatch.setenv(source, "true")
        langsmith_utils.get_env_var.cache_clear()  # the SDK caches what the environment says
        try:
            fuse.invoke(lists)
        finally:
            monkeypatch.undo()
            langsmith_utils.get_env_var.cache_clear()
        client.flush()
        assert langsmith_recorder.wait_for(
            lambda runs: any(run.get("name") == "fuse" for run in runs.values())
        )
        recorder.events = [("start", run["name"], 0) for run in langsmith_recorder.runs.values()]
    assert ("start", "fuse") in [event[:2] for event in recorder.events]


@pytest.mark.parametrize("fusion_class", list(fusion.FUSIONS.values()))
def test_each_fusion_passes_every_setting_its_scorer_takes_from_its_own_fields(
    fusion_class: type[fusion.BaseFusion],
) -> None:
    parameters = inspect.signature(fusion_class.scorer).parameters.values()
    keywords = {
        parameter.name for parameter in parameters if parameter.kind is parameter.KEYWORD_ONLY
    }
    assert keywords == set(fusion_class.scorer_fields) <= fusion_class.model_fields.keys()
