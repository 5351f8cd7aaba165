"""The strategy-specific steps of the offline chains, built on :mod:`offline`'s algorithms.

Without a chat model every strategy still does what its name says, visibly:

* decomposition: :class:`OfflineSubQuestions` splits the question into the sides of a
  comparison or its clauses (a single clause stays whole, and the answer says so); each is
  answered in turn and :class:`DecompositionExtractiveAnswer` quotes them under their
  sub-question;
* step-back: :class:`BroaderQuestion` keeps the question's most common words and adds the
  feedback's leading terms; :class:`StepBackExtractiveAnswer` shows what that broader question
  retrieved, apart from the question's own passages;
* HyDE: :class:`HydeExtractiveAnswer` shows the hypothetical passage (:class:`offline.FeedbackPassage`)
  that was searched.

>>> # OfflineSubQuestions(retriever=bm25).invoke("How do heat pumps work and what do they cost?")
>>> # ['How do heat pumps work?', 'What do they cost?']
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.documents import Document

from rag_fusion_chain.fusion import document_id
from rag_fusion_chain.offline import (
    OFFLINE_LABEL,
    ExtractiveAnswer,
    PseudoRelevanceFeedback,
    _FeedbackRunnable,
    best_sentences,
    bm25_document_frequency,
    bm25_terms,
)
from rag_fusion_chain.query_parsing import dedupe_key
from rag_fusion_chain.validation import MAX_QUERIES, validate_count

_QUESTION_WORD = (
    r"(?:what|how|why|when|where|which|who|whom|whose|is|are|was|were|do|does|did|can|could|"
    r"should|would|will|has|have)\b"
)
_CLAUSE_BREAK = re.compile(
    rf"\s*[;?？；]\s*|,?\s+\b(?:and|but|or)\s+(?={_QUESTION_WORD})", re.IGNORECASE
)
"""Where a question's clauses meet: ``;``, ``?``, or "and"/"but"/"or" before a question word
("... work and what do they cost?"; "weight and breast cancer" is one clause)."""
_COMPARISON = re.compile(
    r"\b(?:the\s+)?(?:differences?|comparison)\s+between\s+(?P<first>.+?)\s+and\s+"
    r"(?P<second>.+?)\s*[?.]*$"
    r"|^(?:(?:how|why|which)\s+)?(?:(?:does|do|did|is|are)\s+)?(?P<left>.+?)\s+(?:versus|vs\.?|"
    r"compared?s?\s+(?:to|with)|better\s+than|worse\s+than)\s+(?P<right>.+?)\s*[?.]*$",
    re.IGNORECASE,
)
"""A comparison: "the difference between A and B", "A versus B", "how does A compare to B"."""
_WORD = re.compile(r"[^\W_]+")
SINGLE_CLAUSE_NOTE = (
    "The question is a single clause with no comparison, so it was not split into "
    "sub-questions; these are its passages' best sentences, quoted as they are."
)


def _as_question(clause: str) -> str:
    """A clause as a question: capitalised, ending with "?"."""
    clause = clause.strip(" ,.")
    return f"{clause[:1].upper()}{clause[1:]}{'' if clause.endswith('?') else '?'}"


def question_clauses(question: str, terms_of: Any, *, minimum_terms: int = 2) -> list[str]:
    """The parts of ``question`` to answer one by one, as questions: the two sides of a
    comparison ("What is A?", "What is B?"), else its clauses (split at ``;``, ``?`` and at
    "and"/"but"/"or" before a question word), each with at least ``minimum_terms`` index terms
    (a side needs one). A single clause gives itself alone: nothing is padded on.

    >>> question_clauses("How do heat pumps work and what do they cost?", str.split)
    ['How do heat pumps work?', 'What do they cost?']
    >>> question_clauses("What is the difference between PCA and kernel PCA?", str.split)
    ['What is PCA?', 'What is kernel PCA?']
    >>> question_clauses("Does birth weight and breast cancer risk correlate?", str.split)
    ['Does birth weight and breast cancer risk correlate?']
    """
    comparison = _COMPARISON.search(question.strip())
    if comparison:
        sides = [side for side in comparison.groups() if side]
        if len(sides) == 2 and all(terms_of(side) for side in sides):
            return [_as_question(f"What is {side}") for side in sides]
    clauses = [part for part in _CLAUSE_BREAK.split(question) if part.strip(" ,.")]
    kept = [clause for clause in clauses if len(terms_of(clause)) >= minimum_terms]
    return [_as_question(clause) for clause in kept] if len(kept) > 1 else [question]


def expansion_words(question: str, expanded: str) -> list[str]:
    """The words pseudo-relevance feedback appended to ``question`` in ``expanded``.

    >>> expansion_words("heat pumps", "heat pumps refrigerant compressor")
    ['refrigerant', 'compressor']
    """
    return expanded[len(question) :].split() if expanded.startswith(question) else []


class OfflineSubQuestions(_FeedbackRunnable):
    """Decomposition without a model: at most ``n`` sub-questions of the question.

    The comparison sides or clauses of :func:`question_clauses`; a question of one clause gives
    itself alone (the answer says so) rather than the question padded with keywords. ``str``
    or ``{"question"}`` to ``list[str]``, run name ``generate_queries``, deterministic.
    """

    n: int = 3

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        validate_count("n", self.n, MAX_QUERIES)

    def _from_feedback(self, question: str, feedback: list[Document]) -> list[str]:
        return question_clauses(question, bm25_terms(self.retriever))[: self.n]


class BroaderQuestion(_FeedbackRunnable):
    """Step-back without a model: the question's ``kept_share`` most common words (by document
    frequency in the BM25 index) followed by the feedback's ``terms`` leading expansion terms.

    ``str`` out, like :func:`queries.step_back`; the question itself when nothing broader shows.
    """

    kept_share: float = 0.5
    terms: int = 3

    def _from_feedback(self, question: str, feedback: list[Document]) -> str:
        terms_of = bm25_terms(self.retriever)
        frequency = bm25_document_frequency(self.retriever)
        words = [word for word in _WORD.findall(question) if terms_of(word)]
        by_frequency = sorted(words, key=lambda word: -max(map(frequency, terms_of(word))))
        kept = set(by_frequency[: max(1, round(len(words) * self.kept_share))])
        expanded = PseudoRelevanceFeedback(
            retriever=self.retriever, n=1, terms_per_query=self.terms
        )._from_feedback(question, feedback)
        added = expansion_words(question, expanded[0]) if expanded else []
        broader = " ".join([word for word in words if word in kept] + added)
        return broader or question


def _cited(
    question_terms: set[str],
    documents: Sequence[Document],
    numbers: Sequence[int],
    answer: ExtractiveAnswer,
) -> list[str]:
    """Bullet lines of the best sentences of ``documents``, cited with the given ``numbers``."""
    picked = best_sentences(
        question_terms,
        [document.page_content for document in documents],
        answer.terms_of,
        count=answer.sentences,
        per_passage=answer.per_passage,
    )
    return [f"- {sentence} [{numbers[index]}]" for index, sentence in picked]


class StepBackExtractiveAnswer(ExtractiveAnswer):
    """The offline step-back answer: the question's passages quoted as usual, then the broader
    question and what it retrieved (``step_back_retrieved``), cited by the numbers the sources
    give them: a passage the question found too keeps its number, the others (the
    ``step_back_documents``) are numbered on after ``documents``."""

    def lines(self, state: Mapping[str, Any]) -> list[str]:
        documents = list(state["documents"])
        lines = super().lines({"question": state["question"], "documents": documents})
        broader = state.get("step_back_question")
        if not broader:
            return lines
        numbers = {document_id(document): number for number, document in enumerate(documents, 1)}
        for document in state.get("step_back_documents", []):
            numbers.setdefault(document_id(document), len(numbers) + 1)
        retrieved = list(state.get("step_back_retrieved", state.get("step_back_documents", [])))
        cited = _cited(
            set(self.terms_of(broader)) | set(self.terms_of(state["question"])),
            retrieved,
            [numbers[document_id(document)] for document in retrieved],
            self,
        )
        heading = f"Broader question searched: {broader}"
        return [*lines, heading, *(cited or ["- (no passage came back for it)"])]


class HydeExtractiveAnswer(ExtractiveAnswer):
    """The offline HyDE answer: the hypothetical passage that was searched, then the quotes."""

    def lines(self, state: Mapping[str, Any]) -> list[str]:
        lines = super().lines(state)
        searched = list(state.get("queries", []))
        if not searched:
            return lines
        return [lines[0], f"Hypothetical passage searched: {searched[0]}", *lines[1:]]


class DecompositionExtractiveAnswer(ExtractiveAnswer):
    """The offline decomposition answer: each sub-question with the sentences its own passages
    give, in the order they were answered, then the question's; citations number the sources
    (sub-questions' passages first, then the question's, each once). A question of one clause
    (its only sub-question is itself) is quoted once, under :data:`SINGLE_CLAUSE_NOTE`."""

    def lines(self, state: Mapping[str, Any]) -> list[str]:
        question_key = dedupe_key(state["question"])
        answered = list(state.get("sub_answers", []))
        splits = [item for item in answered if dedupe_key(item["question"]) != question_key]
        own = [
            document for item in answered if item not in splits for document in item["documents"]
        ]
        groups = [*((item["question"], item["documents"]) for item in splits)]
        groups.append((state["question"], [*own, *state.get("documents", [])]))
        numbers: dict[str, int] = {}
        for _, documents in groups:
            for document in documents:
                numbers.setdefault(document_id(document), len(numbers) + 1)
        if not numbers:
            return super().lines({"question": state["question"], "documents": []})
        lines = [
            f"{OFFLINE_LABEL} Sub-questions answered in turn from their own passages."
            if splits
            else f"{OFFLINE_LABEL} {SINGLE_CLAUSE_NOTE}"
        ]
        for position, (question, documents) in enumerate(groups, 1):
            label = "Question" if position == len(groups) else f"Sub-question {position}"
            cited = _cited(
                set(self.terms_of(question)),
                documents,
                [numbers[document_id(document)] for document in documents],
                self,
            )
            lines += [f"{label}: {question}", *(cited or ["- (no sentence shares its terms)"])]
        return lines


__all__ = [
    "BroaderQuestion",
    "DecompositionExtractiveAnswer",
    "HydeExtractiveAnswer",
    "OfflineSubQuestions",
    "SINGLE_CLAUSE_NOTE",
    "StepBackExtractiveAnswer",
    "expansion_words",
    "question_clauses",
]
