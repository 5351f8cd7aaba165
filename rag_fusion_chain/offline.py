"""The kit without a chat model: a pseudo-relevance-feedback query generator and an extractive answer.

Nothing here imitates a language model. Queries come from **pseudo-relevance feedback**: the top
BM25 hits for the question are taken as relevant, their highest-weighted terms that the question
lacks (tf-idf, with the BM25 index's own tokenizer and document frequencies) are grouped, and each
group is appended to the question. The answer is **extractive**: the sentences of the fused
passages that share the most terms with the question, each cited by its passage number, under a
label saying so (:data:`OFFLINE_LABEL`).

* :class:`PseudoRelevanceFeedback` has the contract of :class:`queries.QueryGenerator`: ``str`` or
  ``{"question": str}`` to ``list[str]``, run name ``generate_queries``, never empty.
* :class:`FeedbackPassage` stands in for HyDE's hypothetical passage (``str`` out).
* :class:`ExtractiveAnswer` takes the chains' state (``question``, ``documents``) where the
  ``answer`` step goes and streams its lines.

The strategies (:mod:`strategies`) build their offline steps from these, and the chains run them
when no model is given: ``chains.rag_fusion_chain([bm25, vectors])`` answers offline.

>>> # PseudoRelevanceFeedback(retriever=bm25, n=3).invoke("birth weight and breast cancer")
"""

from __future__ import annotations

import math
import re
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForChainRun
from langchain_core.documents import Document
from langchain_core.runnables import (
    RunnableConfig,
    RunnableSerializable,
)
from langchain_core.runnables.config import patch_config
from pydantic import ConfigDict

from rag_fusion_chain.queries import dedupe_key
from rag_fusion_chain.retrievers.bm25 import BM25Retriever, tokenize
from rag_fusion_chain.retrievers.fanout import FusionRetriever, MultiRetriever, as_retriever_list
from rag_fusion_chain.validation import MAX_QUERIES, QuestionInput, question_of, validate_count

OFFLINE_LABEL = "[offline extractive answer]"
"""How every offline answer starts, so nobody mistakes it for a generated one."""
OFFLINE_NOTE = (
    "No chat model is configured: these are the sentences of the retrieved passages that share "
    "the most terms with the question, quoted as they are, not a generated answer."
)
Terms = Callable[[str], list[str]]
"""A tokenizer: text to index terms."""

_WORD = re.compile(r"[^\W_]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；])|\n\s*\n")
"""Sentence ends and blank lines; a single line break (wrapped PDF text) does not end a sentence."""


# --------------------------------------------------------------------------------------------
# Pure functions: term weights, expansion terms, sentences
# --------------------------------------------------------------------------------------------


def inverse_document_frequency(document_frequency: int, document_count: int) -> float:
    """BM25's (Lucene's) idf: ``log(1 + (N - df + 0.5) / (df + 0.5))``, always positive.

    >>> round(inverse_document_frequency(1, 100), 3), round(inverse_document_frequency(99, 100), 3)
    (4.21, 0.015)
    """
    return math.log(1 + (document_count - document_frequency + 0.5) / (document_frequency + 0.5))


def is_expansion_candidate(term: str) -> bool:
    """Terms worth adding to a query: with a letter, and three characters long unless CJK.

    >>> [is_expansion_candidate(term) for term in ("95", "ci", "insulin", "发电")]
    [False, False, True, True]
    """
    return any(character.isalpha() for character in term) and (len(term) >= 3 or not term.isascii())


def expansion_terms(
    question_terms: set[str],
    feedback: Sequence[tuple[Sequence[str], float]],
    document_frequency: Callable[[str], int],
    document_count: int,
    count: int,
) -> list[str]:
    """The ``count`` best expansion terms from feedback documents (their terms, BM25 score).

    weight(t) = idf(t) · Σ_d w_d · tf(t, d) / |d|, with w_d the document's share of the feedback
    scores (equal shares when the scores are not positive). Terms of the question and
    non-candidates (:func:`is_expansion_candidate`) are skipped; ties go to the term that sorts
    first, so the result is deterministic.

    >>> feedback = [(["insulin", "glucos", "insulin"], 2.0), (["glucos", "liver"], 1.0)]
    >>> expansion_terms({"liver"}, feedback, lambda term: 1, 10, 2)
    ['insulin', 'glucos']
    """
    total = sum(max(score, 0.0) for _, score in feedback)
    weights: dict[str, float] = {}
    for terms, score in feedback:
        if not terms:
            continue
        share = max(score, 0.0) / total if total > 0 else 1.0 / len(feedback)
        for term, frequency in Counter(terms).items():
            if term in question_terms or not is_expansion_candidate(term):
                continue
            weights[term] = weights.get(term, 0.0) + share * frequency / len(terms)
    ranked = sorted(
        (
            (-weight * inverse_document_frequency(document_frequency(term), document_count), term)
            for term, weight in weights.items()
        )
    )
    return [term for _, term in ranked[:count]]


def surface_forms(texts: Sequence[str], terms_of: Terms) -> dict[str, str]:
    """For each index term, its most frequent word in ``texts`` (lower case; first seen on ties).

    Stemmed terms read badly in a query; the words they came from do not.

    >>> surface_forms(["Running runs run"], lambda word: [word[:3]])
    {'run': 'running'}
    """
    counts: dict[str, Counter[str]] = {}
    term_of_word: dict[str, list[str]] = {}
    for text in texts:
        for match in _WORD.finditer(text.casefold()):
            word = match.group()
            if word not in term_of_word:
                term_of_word[word] = terms_of(word)
            word_terms = term_of_word[word]
            if len(word_terms) == 1:
                counts.setdefault(word_terms[0], Counter())[word] += 1
    return {term: words.most_common(1)[0][0] for term, words in counts.items()}


def expanded_queries(
    question: str, terms: Sequence[str], n: int, terms_per_query: int
) -> list[str]:
    """Up to ``n`` queries: the question followed by consecutive groups of ``terms``.

    >>> expanded_queries("q", ["a", "b", "c", "d", "e"], n=3, terms_per_query=2)
    ['q a b', 'q c d', 'q e']
    """
    groups = [
        terms[start : start + terms_per_query] for start in range(0, len(terms), terms_per_query)
    ]
    return [f"{question} {' '.join(group)}" for group in groups[:n] if group]


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` (Western and CJK sentence ends, blank lines), whitespace collapsed.

    >>> split_sentences("Title\\n\\nFirst one,\\nwrapped. Second one? 第三句。第四句")
    ['Title', 'First one, wrapped.', 'Second one?', '第三句。', '第四句']
    """
    sentences = (" ".join(sentence.split()) for sentence in _SENTENCE_END.split(text))
    return [sentence for sentence in sentences if sentence]


def best_sentences(
    question_terms: set[str],
    passages: Sequence[str],
    terms_of: Terms,
    *,
    count: int,
    per_passage: int = 1,
) -> list[tuple[int, str]]:
    """The ``count`` sentences sharing most distinct terms with the question, as (passage, text).

    Passages are numbered from 0 in the order given. Ties go to the earlier passage, then the
    earlier sentence; sentences sharing no term are never chosen; at most ``per_passage``
    sentences come from one passage.

    >>> terms = lambda text: text.casefold().rstrip(".").split()
    >>> best_sentences({"heat", "pump"}, ["Cold. Heat pump.", "Heat only."], terms, count=2)
    [(0, 'Heat pump.'), (1, 'Heat only.')]
    """
    scored = []
    for passage_index, passage in enumerate(passages):
        for sentence_index, sentence in enumerate(split_sentences(passage)):
            overlap = len(question_terms & set(terms_of(sentence)))
            if overlap:
                scored.append((-overlap, passage_index, sentence_index, sentence))
    chosen: list[tuple[int, str]] = []
    taken: Counter[int] = Counter()
    for _, passage_index, _, sentence in sorted(scored):
        if len(chosen) == count:
            break
        if taken[passage_index] < per_passage:
            taken[passage_index] += 1
            chosen.append((passage_index, sentence))
    return chosen


def extractive_answer(
    question: str,
    documents: Sequence[Document],
    terms_of: Terms,
    *,
    sentences: int = 3,
    per_passage: int = 1,
) -> list[str]:
    """The lines of an offline answer: the label and note, then quoted sentences with ``[i]``.

    ``[i]`` is the document's 1-based position in ``documents``, the numbering of
    :func:`context.format_context`, so citations point at the passages as the sources list them.

    >>> lines = extractive_answer("heat pumps", [Document("Heat pumps move heat.")], str.split)
    >>> lines[0].startswith(OFFLINE_LABEL), lines[1:]
    (True, ['- Heat pumps move heat. [1]'])
    """
    if not documents:
        return [f"{OFFLINE_LABEL} No passages were retrieved, so there is nothing to quote."]
    picked = best_sentences(
        set(terms_of(question)),
        [document.page_content for document in documents],
        terms_of,
        count=sentences,
        per_passage=per_passage,
    )
    if not picked:
        return [
            f"{OFFLINE_LABEL} None of the {len(documents)} retrieved passages shares a term "
            "with the question."
        ]
    return [f"{OFFLINE_LABEL} {OFFLINE_NOTE}"] + [
        f"- {sentence} [{passage_index + 1}]" for passage_index, sentence in picked
    ]


# --------------------------------------------------------------------------------------------
# BM25 feedback
# --------------------------------------------------------------------------------------------


def bm25_terms(retriever: BM25Retriever) -> Terms:
    """The retriever's own tokenizer, with its stemming and stopword settings."""

    def terms_of(text: str) -> list[str]:
        return tokenize(text, stem=retriever.stem, remove_stopwords=retriever.remove_stopwords)

    return terms_of


def bm25_document_frequency(retriever: BM25Retriever) -> Callable[[str], int]:
    """Document frequency of an index term, read from the bm25s index (0 for unknown terms).

    bm25s keeps one column per vocabulary term in a CSC score matrix, so a term's document count
    is the length of its column: ``indptr[id + 1] - indptr[id]``.
    """
    vocabulary: dict[str, int] = retriever.index.vocab_dict
    pointers = retriever.index.scores["indptr"]

    def document_frequency(term: str) -> int:
        term_id = vocabulary.get(term)
        return 0 if term_id is None else int(pointers[term_id + 1] - pointers[term_id])

    return document_frequency


class _FeedbackRunnable(RunnableSerializable[QuestionInput, Any]):
    """Shared fields and plumbing: fetch the top BM25 hits for the question, then build output."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str | None = "generate_queries"
    retriever: BM25Retriever
    """The BM25 index whose top hits are the feedback and whose tokenizer and statistics are used."""
    feedback_documents: int = 5
    """How many top BM25 hits are taken as relevant."""

    def model_post_init(self, context: Any) -> None:
        validate_count("feedback_documents", self.feedback_documents)

    def _from_feedback(self, question: str, feedback: list[Document]) -> Any:
        raise NotImplementedError

    def _run(
        self, value: QuestionInput, run_manager: CallbackManagerForChainRun, config: RunnableConfig
    ) -> Any:
        question = question_of(value)
        feedback = self.retriever.invoke(
            question,
            patch_config(config, callbacks=run_manager.get_child()),
            k=self.feedback_documents,
        )
        return self._from_feedback(question, feedback)

    def invoke(
        self, input: QuestionInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Any:
        return self._call_with_config(self._run, input, config)


class PseudoRelevanceFeedback(_FeedbackRunnable):
    """Queries without a model: the question plus groups of expansion terms from its top BM25 hits.

    Same contract as :class:`queries.QueryGenerator` (``str`` or ``{"question"}`` to
    ``list[str]``, never empty). The top ``feedback_documents`` hits are tokenized with the
    retriever's tokenizer; the ``n * terms_per_query`` best terms absent from the question
    (:func:`expansion_terms`, idf from the BM25 index) are shown as their most frequent word and
    appended, ``terms_per_query`` at a time, to the question. ``include_original`` puts the
    question itself first. With no feedback (no BM25 hit) the result is the question alone, with a
    warning. Deterministic: the same index and question always give the same queries.

    >>> # PseudoRelevanceFeedback(retriever=bm25, n=3).invoke("birth weight and breast cancer")
    >>> # ['birth weight and breast cancer intrauterine size risk', ...]
    """

    n: int = 4
    terms_per_query: int = 3
    include_original: bool = False

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        validate_count("n", self.n, MAX_QUERIES)
        validate_count("terms_per_query", self.terms_per_query)

    def _from_feedback(self, question: str, feedback: list[Document]) -> list[str]:
        terms_of = bm25_terms(self.retriever)
        texts = [document.page_content for document in feedback]
        terms = expansion_terms(
            set(terms_of(question)),
            [
                (terms_of(text), float(document.metadata.get("score", 0.0)))
                for text, document in zip(texts, feedback, strict=True)
            ],
            bm25_document_frequency(self.retriever),
            len(self.retriever.documents),
            self.n * self.terms_per_query,
        )
        words = surface_forms(texts, terms_of)
        expanded = expanded_queries(
            question, [words.get(term, term) for term in terms], self.n, self.terms_per_query
        )
        if not expanded:
            warnings.warn(
                "pseudo-relevance feedback found no expansion terms (no BM25 hit for the "
                "question); using the original question alone",
                stacklevel=4,
            )
            return [question]
        generated = [question, *expanded] if self.include_original else expanded
        return list({dedupe_key(query): query for query in generated}.values())


class FeedbackPassage(_FeedbackRunnable):
    """HyDE without a model: the feedback sentences most like the question, as one search passage.

    Takes the ``sentences`` best sentences (:func:`best_sentences`) of the top BM25 hits and
    joins them; with no hit, the question itself (with a warning). Output ``str``, like
    :func:`queries.hyde`.
    """

    sentences: int = 3

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        validate_count("sentences", self.sentences)

    def _from_feedback(self, question: str, feedback: list[Document]) -> str:
        terms_of = bm25_terms(self.retriever)
        picked = best_sentences(
            set(terms_of(question)),
            [document.page_content for document in feedback],
            terms_of,
            count=self.sentences,
        )
        if not picked:
            warnings.warn(
                "no BM25 hit shares a term with the question; searching with the question itself",
                stacklevel=4,
            )
            return question
        return " ".join(sentence for _, sentence in picked)


# --------------------------------------------------------------------------------------------
# Extractive answer
# --------------------------------------------------------------------------------------------


class ExtractiveAnswer(RunnableSerializable[Mapping[str, Any], str]):
    """The offline ``answer`` step: quote the fused passages' sentences closest to the question.

    Input: the chains' state, a mapping with ``question`` and ``documents`` (the fused passages,
    numbered from 1 as :func:`context.format_context` numbers them) and, for step-back, the
    ``step_back_documents`` numbered on after them. Output: :func:`extractive_answer`'s lines,
    starting with :data:`OFFLINE_LABEL`; ``stream`` yields them line by line.
    Sentences are compared through ``terms_of`` (default: the BM25 tokenizer with stemming).

    >>> ExtractiveAnswer().invoke(  # doctest: +ELLIPSIS
    ...     {"question": "heat", "documents": [Document("Heat rises.")]}
    ... )
    '[offline extractive answer] No chat model ...\\n- Heat rises. [1]'
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str | None = "answer"
    sentences: int = 3
    """Sentences quoted at most."""
    per_passage: int = 1
    """Sentences quoted at most from one passage."""
    terms_of: Terms = tokenize

    def model_post_init(self, context: Any) -> None:
        validate_count("sentences", self.sentences)
        validate_count("per_passage", self.per_passage)

    def lines(self, state: Mapping[str, Any]) -> list[str]:
        """The answer's lines for one state (no callbacks)."""
        if not isinstance(state, Mapping) or "documents" not in state:
            raise TypeError(
                "ExtractiveAnswer input must be a mapping with 'question' and 'documents', "
                f"got {type(state).__name__}"
            )
        documents = [*state["documents"], *state.get("step_back_documents", [])]
        return extractive_answer(
            question_of(state),
            documents,
            self.terms_of,
            sentences=self.sentences,
            per_passage=self.per_passage,
        )

    def _stream_lines(self, inputs: Iterator[Mapping[str, Any]]) -> Iterator[str]:
        for state in inputs:
            for number, line in enumerate(self.lines(state)):
                yield line if number == 0 else "\n" + line

    def stream(
        self, input: Mapping[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[str]:
        yield from self._transform_stream_with_config(iter([input]), self._stream_lines, config)

    def invoke(
        self, input: Mapping[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> str:
        return "".join(self.stream(input, config))


# --------------------------------------------------------------------------------------------
# Chains
# --------------------------------------------------------------------------------------------


def feedback_retriever(retrievers: Any) -> BM25Retriever:
    """The first :class:`BM25Retriever` in ``retrievers``, searching inside fan-outs and fusions.

    ``retrievers`` is one retriever, a list, a :class:`MultiRetriever`, or a
    :class:`FusionRetriever` such as :func:`retrievers.hybrid_retriever`'s (searched depth first).
    """
    pending = list(as_retriever_list(retrievers))
    while pending:
        retriever = pending.pop(0)
        if isinstance(retriever, BM25Retriever):
            return retriever
        if isinstance(retriever, FusionRetriever):
            retriever = retriever.retrievers
        if isinstance(retriever, MultiRetriever):
            pending[:0] = retriever.retrievers
    raise ValueError(
        "feedback: offline query generation needs a BM25Retriever; pass feedback= or include "
        "one in retrievers"
    )


__all__ = [
    "OFFLINE_LABEL",
    "OFFLINE_NOTE",
    "ExtractiveAnswer",
    "FeedbackPassage",
    "PseudoRelevanceFeedback",
    "best_sentences",
    "bm25_document_frequency",
    "bm25_terms",
    "expanded_queries",
    "expansion_terms",
    "extractive_answer",
    "feedback_retriever",
    "inverse_document_frequency",
    "is_expansion_candidate",
    "split_sentences",
    "surface_forms",
]
