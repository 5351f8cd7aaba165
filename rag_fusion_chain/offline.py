"""The strategies' query steps without a chat model: pure functions of the question and the
documents any retriever returned for it (term statistics from those documents, phrases from their
prose only). A step with nothing to work from returns the question, with a warning.

>>> feedback_queries("heat pumps", [Document("Heat pumps use a refrigerant. The refrigerant "
...     "loop is sealed.")], 1)
['heat pumps refrigerant, use, loop']
"""

from __future__ import annotations

import math
import re
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence

from langchain_core.documents import Document

from rag_fusion_chain.extractive import (
    CODE_TOKEN,
    OFFLINE_LABEL,
    OFFLINE_NOTE,
    SINGLE_CLAUSE_NOTE,
    best_sentences,
    decomposition_answer,
    extractive_answer,
    hyde_answer,
    passage_sentences,
    rewrite_answer,
    step_back_answer,
)
from rag_fusion_chain.retrievers.bm25 import tokenize
from rag_fusion_chain.validation import MAX_QUERIES, question_of, validate_count

FEEDBACK_DOCUMENTS = 5
"""The first distinct documents taken as relevant (pass them best first)."""
TERMS_PER_QUERY = 3
"""Words a feedback query adds to the question, about."""
REWRITE_TERMS = 2
"""Document phrases a keyword rewrite adds to the question's own words, at most."""

_WORD = re.compile(r"[^\W_]+")
_WRAPPING = "\"'“”‘’()[]{}<>.,;:!?…"
_QUESTION_WORD = (
    r"(?:what|how|why|when|where|which|who|whom|whose|is|are|was|were|do|does|did|can|could|"
    r"should|would|will|has|have)\b"
)
_CLAUSE_BREAK = re.compile(
    rf"\s*[;?？；]\s*|,?\s+\b(?:and|but|or)\s+(?={_QUESTION_WORD})", re.IGNORECASE
)
"""Where clauses meet: ``;``, ``?``, or "and"/"but"/"or" before a question word."""
_COMPARISON = re.compile(
    r"\b(?:the\s+)?(?:differences?|comparison)\s+between\s+(?P<first>.+?)\s+and\s+"
    r"(?P<second>.+?)\s*[?.]*$"
    r"|^(?:(?:how|why|which)\s+)?(?:(?:does|do|did|is|are)\s+)?(?P<left>.+?)\s+(?:versus|vs\.?|"
    r"compared?s?\s+(?:to|with)|better\s+than|worse\s+than)\s+(?P<right>.+?)\s*[?.]*$",
    re.IGNORECASE,
)


def _checked(question: str, documents: Sequence[Document]) -> tuple[str, list[Document]]:
    """The stripped question and the distinct documents (by text), in order; bad input raises."""
    question = question_of(question)
    if (
        not isinstance(documents, Sequence)
        or isinstance(documents, str)
        or not all(isinstance(document, Document) for document in documents)
    ):
        raise TypeError("documents must be a sequence of langchain Document objects")
    distinct: dict[str, Document] = {}
    for document in documents:
        distinct.setdefault(document.page_content, document)
    return question, list(distinct.values())


def _document_frequency(documents: Sequence[Document]) -> Counter[str]:
    """How many of ``documents`` hold each term."""
    return Counter(term for document in documents for term in set(tokenize(document.page_content)))


def inverse_document_frequency(document_frequency: int, document_count: int) -> float:
    """BM25's (Lucene's) idf, always positive, as bm25s computes it."""
    return math.log(1 + (document_count - document_frequency + 0.5) / (document_frequency + 0.5))


def _expansion_weights(
    question: str, texts: Sequence[str], frequency: Counter[str], count: int
) -> dict[str, float]:
    """Terms of the feedback ``texts`` the question lacks, weighed by RM1 (Σ_d tf/|d|/(1 + rank))
    times 1 + idf over the ``count`` documents, so a term all of them share counts less."""
    question_terms = set(tokenize(question))
    weights: dict[str, float] = {}
    for rank, text in enumerate(texts):
        terms = [
            term
            for term in tokenize(text)
            if term not in question_terms
            and any(character.isalpha() for character in term)
            and (len(term) >= 3 or not term.isascii())
        ]
        for term, times in Counter(terms).items():
            weights[term] = weights.get(term, 0.0) + times / len(terms) / (1 + rank)
    return {
        term: weight * (1 + inverse_document_frequency(frequency[term], count))
        for term, weight in weights.items()
    }


def _shown_word(word: str) -> str:
    """A word as a query shows it: lower case, unless an acronym or a gene-like name."""
    return word if any(character.isupper() for character in word[1:]) else word.lower()


def _phrase_runs(text: str) -> Iterator[list[str]]:
    """Runs of plain words: punctuation ends a run, and a token that is not one plain word
    (an identifier, a call, a number, a colour code) ends it without joining it."""
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


def _keyword_phrases(
    texts: Sequence[str], weights: dict[str, float], max_words: int = 3
) -> list[tuple[str, list[str]]]:
    """(phrase, its terms) of up to ``max_words`` adjacent weighted terms, best first, sharing no
    term; a phrase of several words must occur twice (a collocation)."""
    candidates: dict[str, tuple[float, int, str, list[str]]] = {}
    occurrences: Counter[str] = Counter()
    for text in texts:
        for words in _phrase_runs(text):
            run: list[tuple[str, str]] = []
            for word in words:
                word_terms = tokenize(word)
                if len(word_terms) != 1 or word_terms[0] not in weights:
                    run = []
                    continue
                run.append((word, word_terms[0]))
                for start in range(max(0, len(run) - max_words), len(run)):
                    window = run[start:]
                    terms = list(dict.fromkeys(term for _, term in window))
                    phrase = " ".join(_shown_word(word) for word, _ in window)
                    key = phrase.casefold()
                    occurrences[key] += 1
                    if len(terms) == len(window) and key not in candidates:
                        worth = sum(weights[term] for term in terms)
                        candidates[key] = (worth, len(candidates), phrase, terms)
    chosen: list[tuple[str, list[str]]] = []
    used: set[str] = set()
    for _, _, phrase, terms in sorted(candidates.values(), key=lambda item: (-item[0], item[1])):
        if (len(terms) == 1 or occurrences[phrase.casefold()] >= 2) and used.isdisjoint(terms):
            chosen.append((phrase, terms))
            used.update(terms)
    return chosen


def _feedback_phrases(question: str, documents: Sequence[Document], terms: int) -> list[str]:
    """Key phrases of the first :data:`FEEDBACK_DOCUMENTS` documents' prose, best first."""
    texts = [
        " ".join(passage_sentences(document.page_content))
        for document in documents[:FEEDBACK_DOCUMENTS]
    ]
    frequency = _document_frequency(documents)
    weights = _expansion_weights(question, texts, frequency, len(documents))
    strongest = sorted(weights, key=lambda term: (-weights[term], term))[:terms]
    return [phrase for phrase, _ in _keyword_phrases(texts, {t: weights[t] for t in strongest})]


def feedback_queries(question: str, documents: Sequence[Document], n: int) -> list[str]:
    """``n`` pseudo-relevance-feedback queries: the question, then about :data:`TERMS_PER_QUERY`
    words of its documents' key phrases (no phrase in two queries); else ``[question]``, warned."""
    validate_count("n", n, MAX_QUERIES)
    question, documents = _checked(question, documents)
    groups: list[list[str]] = []
    words = TERMS_PER_QUERY
    for phrase in _feedback_phrases(question, documents, 4 * n * TERMS_PER_QUERY):
        if words >= TERMS_PER_QUERY:
            if len(groups) == n:
                break
            groups.append([])
            words = 0
        groups[-1].append(phrase)
        words += len(phrase.split())
    if not groups:
        warnings.warn(
            "pseudo-relevance feedback found no expansion terms in the documents; "
            "using the question alone",
            stacklevel=2,
        )
        return [question]
    return [f"{question} {', '.join(group)}" for group in groups]


def _as_question(clause: str) -> str:
    """A clause as a question: capitalised, ending with "?"."""
    clause = clause.strip(" ,.")
    return f"{clause[:1].upper()}{clause[1:]}{'' if clause.endswith('?') else '?'}"


def sub_questions(question: str, documents: Sequence[Document], n: int) -> list[str]:
    """At most ``n`` parts of the question alone: a comparison's two sides ("What is A?"), else
    its clauses of two terms or more (:data:`_CLAUSE_BREAK`); one clause gives ``[question]``."""
    validate_count("n", n, MAX_QUERIES)
    question, _ = _checked(question, documents)
    comparison = _COMPARISON.search(question)
    if comparison:
        sides = [side for side in comparison.groups() if side]
        if len(sides) == 2 and all(tokenize(side) for side in sides):
            return [_as_question(f"What is {side}") for side in sides][:n]
    clauses = [part for part in _CLAUSE_BREAK.split(question) if part.strip(" ,.")]
    kept = [clause for clause in clauses if len(tokenize(clause)) >= 2]
    return [_as_question(clause) for clause in kept][:n] if len(kept) > 1 else [question]


def _content_words(question: str) -> list[str]:
    """The question's words that are index terms (no stopword), each term once, in order."""
    words: dict[str, str] = {}
    for word in _WORD.findall(question):
        terms = tokenize(word)
        if terms:
            words.setdefault(terms[0], word)
    return list(words.values())


def broader_question(question: str, documents: Sequence[Document]) -> str:
    """The step-back question: the half of its words most documents hold, then the documents'
    leading key phrases. With no documents: the question, with a warning."""
    question, documents = _checked(question, documents)
    if not documents:
        warnings.warn("no documents to step back from; using the question", stacklevel=2)
        return question
    frequency = _document_frequency(documents)
    words = _content_words(question)
    ranked = sorted(words, key=lambda word: -frequency[tokenize(word)[0]])
    kept = set(ranked[: max(1, round(len(words) / 2))])
    added = _feedback_phrases(question, documents, TERMS_PER_QUERY)
    return " ".join([word for word in words if word in kept] + added) or question


def hypothetical_passage(question: str, documents: Sequence[Document]) -> str:
    """HyDE without a model: the three documents' sentences closest to the question, as one
    passage to search. With none sharing a term: the question, with a warning."""
    question, documents = _checked(question, documents)
    picked = best_sentences(question, [document.page_content for document in documents])
    if not picked:
        warnings.warn(
            "no document sentence shares a term with the question; searching with the question",
            stacklevel=2,
        )
        return question
    return " ".join(sentence for _, sentence in picked)


def keyword_rewrite(question: str, documents: Sequence[Document]) -> str:
    """Rewrite-Retrieve-Read without a model: the question's content words the documents use (all
    if they use none), then at most :data:`REWRITE_TERMS` of their key phrases."""
    question, documents = _checked(question, documents)
    words = _content_words(question)
    if not words:
        return question
    # words the documents never use ("please", "actually") are conversation, not search terms
    vocabulary = {term for document in documents for term in tokenize(document.page_content)}
    used = [word for word in words if tokenize(word)[0] in vocabulary] or words
    return " ".join(used + _feedback_phrases(question, documents, TERMS_PER_QUERY)[:REWRITE_TERMS])


__all__ = [
    "OFFLINE_LABEL",
    "OFFLINE_NOTE",
    "SINGLE_CLAUSE_NOTE",
    "broader_question",
    "decomposition_answer",
    "extractive_answer",
    "feedback_queries",
    "hyde_answer",
    "hypothetical_passage",
    "keyword_rewrite",
    "rewrite_answer",
    "step_back_answer",
    "sub_questions",
]
