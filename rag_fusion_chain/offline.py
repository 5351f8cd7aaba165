"""The kit without a chat model: a pseudo-relevance-feedback query generator and an extractive answer.

Nothing here imitates a language model. Queries come from **pseudo-relevance feedback**: the top
BM25 hits for the question are taken as relevant, their highest-weighted terms that the question
lacks (tf-idf, with the BM25 index's own tokenizer and document frequencies) are read back as the
phrases the passages write them in, and each group of phrases is appended to the question. The
answer is **extractive**: the sentences of the fused passages best supported by the question's
rarer terms (BM25 over the passages' sentences, the generated queries' terms at half weight),
headings, titles and table rows left out, each cited by its passage number, under a label saying
so (:data:`OFFLINE_LABEL`).

* :class:`PseudoRelevanceFeedback` has the contract of :class:`queries.QueryGenerator`: ``str`` or
  ``{"question": str}`` to ``list[str]``, run name ``generate_queries``, never empty.
* :class:`FeedbackPassage` stands in for HyDE's hypothetical passage (``str`` out).
* :class:`~rag_fusion_chain.extractive.ExtractiveAnswer` (in :mod:`extractive`, re-exported
  here) takes the chains' state (``question``, ``documents``) where the ``answer`` step goes.

The strategies (:mod:`strategies`) build their offline steps from these, and the chains run them
when no model is given: ``chains.rag_fusion_chain([bm25, vectors])`` answers offline.

>>> # PseudoRelevanceFeedback(retriever=bm25, n=3).invoke("birth weight and breast cancer")
"""

from __future__ import annotations

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

from rag_fusion_chain.extractive import (
    CODE_TOKEN,
    OFFLINE_LABEL,
    OFFLINE_NOTE,
    ExtractiveAnswer,
    Terms,
    best_sentences,
    extractive_answer,
    inverse_document_frequency,
    passage_sentences,
    split_sentences,
)
from rag_fusion_chain.query_parsing import dedupe_key
from rag_fusion_chain.retrievers.bm25 import BM25Retriever, tokenize
from rag_fusion_chain.retrievers.fanout import MultiRetriever, as_retriever_list
from rag_fusion_chain.retrievers.fusion_retriever import FusionRetriever
from rag_fusion_chain.validation import MAX_QUERIES, QuestionInput, question_of, validate_count

_WORD = re.compile(r"[^\W_]+")
_WRAPPING = "\"'“”‘’()[]{}<>.,;:!?…"
"""Punctuation around a word: it ends a phrase there."""

# --------------------------------------------------------------------------------------------
# Pure functions: expansion terms and the phrases that carry them
# --------------------------------------------------------------------------------------------


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
    weights = expansion_weights(question_terms, feedback, document_frequency, document_count)
    return sorted(weights, key=lambda term: (-weights[term], term))[:count]


def expansion_weights(
    question_terms: set[str],
    feedback: Sequence[tuple[Sequence[str], float]],
    document_frequency: Callable[[str], int],
    document_count: int,
) -> dict[str, float]:
    """Every expansion candidate's weight, as :func:`expansion_terms` ranks them.

    >>> weights = expansion_weights(set(), [(["insulin", "glucos"], 1.0)], lambda term: 1, 10)
    >>> {term: round(weight, 3) for term, weight in weights.items()}
    {'insulin': 0.996, 'glucos': 0.996}
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
    return {
        term: weight * inverse_document_frequency(document_frequency(term), document_count)
        for term, weight in weights.items()
    }


def _shown_word(word: str) -> str:
    """A word as a query shows it: lower case, unless it is an acronym or a gene-like name."""
    return word if any(character.isupper() for character in word[1:]) else word.lower()


def _phrase_runs(text: str) -> Iterator[list[str]]:
    """Runs of plain words of ``text``: punctuation ends a run, and a token that is not one
    plain word (an identifier such as ``delete_file``, a call, a number, ``31mRED`` left by a
    colour code, a hyphenated compound) ends it without joining it.

    >>> list(_phrase_runs('Use "delete_file" to go, then run f(x) in Outside air.'))
    [['Use'], ['to', 'go'], ['then', 'run'], ['in', 'Outside', 'air']]
    """
    run: list[str] = []
    for token in text.split():
        word = token.strip(_WRAPPING)
        if not _WORD.fullmatch(word) or word.isdigit() or CODE_TOKEN.search(token):
            if run:
                yield run
            run = []
            continue
        if token[:1] in _WRAPPING and run:
            yield run
            run = []
        run.append(word)
        if token[-1:] in _WRAPPING:
            yield run
            run = []
    if run:
        yield run


def keyword_phrases(
    texts: Sequence[str],
    terms_of: Terms,
    weights: Mapping[str, float],
    *,
    max_words: int = 3,
    min_repeats: int = 2,
) -> list[tuple[str, list[str]]]:
    """Phrases of ``texts`` made of weighted terms, best first, as (phrase, its terms).

    A phrase is a run of up to ``max_words`` adjacent plain words of the text
    (:func:`_phrase_runs`: no punctuation between them, no code) whose every word is one term
    of ``weights``; a phrase of several words must occur ``min_repeats`` times in ``texts``
    (a collocation such as "outside air", not a verb next to a noun once). A phrase is worth
    the sum of its distinct terms' weights. The phrases returned share no term (a lower phrase
    repeating a term of a better one is dropped), so each adds something new; ties go to the
    phrase seen first.

    >>> weights = {"outsid": 2.0, "air": 1.5, "boreho": 1.0}
    >>> terms = lambda word: [word.casefold()[:6].rstrip("e")] if len(word) > 2 else []
    >>> keyword_phrases(["Outside air, or boreholes.", "Heat the outside air."], terms, weights)
    [('outside air', ['outsid', 'air']), ('boreholes', ['boreho'])]
    """
    candidates: dict[str, tuple[float, int, str, list[str]]] = {}
    occurrences: Counter[str] = Counter()
    for text in texts:
        for words in _phrase_runs(text):
            run: list[tuple[str, str]] = []
            for word in words:
                word_terms = terms_of(word)
                if len(word_terms) != 1 or word_terms[0] not in weights:
                    run = []
                    continue
                run.append((word, word_terms[0]))
                for start in range(max(0, len(run) - max_words), len(run)):
                    window = run[start:]
                    terms = list(dict.fromkeys(term for _, term in window))
                    phrase = " ".join(_shown_word(word) for word, _ in window)
                    occurrences[phrase.casefold()] += 1
                    if len(terms) == len(window) and phrase.casefold() not in candidates:
                        worth = sum(weights[term] for term in terms)
                        candidates[phrase.casefold()] = (worth, len(candidates), phrase, terms)
    chosen: list[tuple[str, list[str]]] = []
    used: set[str] = set()
    for _, _, phrase, terms in sorted(candidates.values(), key=lambda item: (-item[0], item[1])):
        repeated = len(terms) == 1 or occurrences[phrase.casefold()] >= min_repeats
        if repeated and used.isdisjoint(terms):
            chosen.append((phrase, terms))
            used.update(terms)
    return chosen


def expanded_queries(
    question: str, phrases: Sequence[str], n: int, terms_per_query: int
) -> list[str]:
    """Up to ``n`` queries: the question followed by consecutive ``phrases``, comma-separated,
    each query taking phrases until it holds ``terms_per_query`` words.

    >>> expanded_queries("q", ["outside air", "refrigerant", "boreholes", "compressor"], 3, 2)
    ['q outside air', 'q refrigerant, boreholes', 'q compressor']
    """
    groups: list[list[str]] = []
    words = terms_per_query
    for phrase in phrases:
        if words >= terms_per_query:
            if len(groups) == n:
                break
            groups.append([])
            words = 0
        groups[-1].append(phrase)
        words += len(phrase.split())
    return [f"{question} {', '.join(group)}" for group in groups]


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
    """Queries without a model: the question plus key phrases of its top BM25 hits.

    Same contract as :class:`queries.QueryGenerator` (``str`` or ``{"question"}`` to
    ``list[str]``, never empty). The top ``feedback_documents`` hits are tokenized with the
    retriever's tokenizer and their terms absent from the question weighed
    (:func:`expansion_weights`, idf from the BM25 index); the ``2 * n * terms_per_query``
    strongest make up :func:`keyword_phrases`, runs of adjacent words as the passages write them
    ("outside air", "ground source"), which are appended to the question, comma-separated,
    about ``terms_per_query`` words per query (:func:`expanded_queries`). ``include_original``
    puts the question itself first. With no feedback (no BM25 hit) the result is the question
    alone, with a warning. Deterministic: the same index and question always give the same
    queries.

    >>> # PseudoRelevanceFeedback(retriever=bm25, n=3).invoke("birth weight and breast cancer")
    >>> # ['birth weight and breast cancer intrauterine growth, premenopausal', ...]
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
        texts = [" ".join(passage_sentences(document.page_content)) for document in feedback]
        weights = expansion_weights(
            set(terms_of(question)),
            [
                (terms_of(text), float(document.metadata.get("score", 0.0)))
                for text, document in zip(texts, feedback, strict=True)
            ],
            bm25_document_frequency(self.retriever),
            len(self.retriever.documents),
        )
        strongest = sorted(weights, key=lambda term: (-weights[term], term))[
            : 2 * self.n * self.terms_per_query
        ]
        phrases = keyword_phrases(texts, terms_of, {term: weights[term] for term in strongest})
        expanded = expanded_queries(
            question, [phrase for phrase, _ in phrases], self.n, self.terms_per_query
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
    "keyword_phrases",
    "passage_sentences",
    "expansion_weights",
]


# ---- TEMPORARY stand-ins until the offline branch lands (replaced at merge) ----
def _top_words(question: str, documents: Sequence[Document], count: int) -> list[str]:
    asked = set(question.lower().split())
    words: Counter[str] = Counter(
        word for document in documents for word in document.page_content.lower().split()
        if word.isalpha() and len(word) > 4 and word not in asked
    )
    return [word for word, _ in words.most_common(count)]


def feedback_queries(question: str, documents: Sequence[Document], n: int) -> list[str]:
    return [f"{question} {word}" for word in _top_words(question, documents, n)] or [question]


def sub_questions(question: str, documents: Sequence[Document], n: int) -> list[str]:
    return [part.strip() + "?" for part in question.rstrip("?").split(" and ")][:n]


def broader_question(question: str, documents: Sequence[Document]) -> str:
    return " ".join(_top_words(question, documents, 3)) or question


def hypothetical_passage(question: str, documents: Sequence[Document]) -> str:
    return documents[0].page_content[:300] if documents else question


def keyword_rewrite(question: str, documents: Sequence[Document]) -> str:
    return " ".join(word for word in question.split() if len(word) > 3) or question


def extractive_answer(question: str, documents: Sequence[Document], queries: Sequence[str] = ()) -> str:
    return "[offline extractive answer]\n" + "\n".join(d.page_content[:80] for d in documents[:3])


def step_back_answer(question, documents, broader, broader_documents):  # type: ignore[no-untyped-def]
    return extractive_answer(question, [*documents, *broader_documents]) + f"\nbroader: {broader}"


def decomposition_answer(question, answered):  # type: ignore[no-untyped-def]
    return "[offline extractive answer]\n" + "\n".join(q for q, _ in answered)


def hyde_answer(question, passage, documents):  # type: ignore[no-untyped-def]
    return extractive_answer(question, documents) + f"\npassage: {passage[:60]}"


def rewrite_answer(question, rewritten, documents):  # type: ignore[no-untyped-def]
    return extractive_answer(question, documents) + f"\nrewritten: {rewritten}"
