"""Offline pieces: pseudo-relevance-feedback queries, feedback passage, extractive answer, chains."""

from __future__ import annotations

import math
import re
import warnings
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.language_models import FakeListChatModel
from langchain_core.retrievers import BaseRetriever

from rag_fusion_chain import chains, offline, strategies
from rag_fusion_chain.offline import (
    OFFLINE_LABEL,
    ExtractiveAnswer,
    FeedbackPassage,
    PseudoRelevanceFeedback,
)
from rag_fusion_chain.offline_steps import SINGLE_CLAUSE_NOTE, OfflineSubQuestions
from rag_fusion_chain.pipeline import retrieval_pipeline
from rag_fusion_chain.retrievers.bm25 import BM25Retriever, tokenize
from rag_fusion_chain.retrievers.hybrid import hybrid_retriever

CORPUS = [
    Document(
        "Heat pumps move heat with a compressor and a refrigerant. The refrigerant evaporates "
        "outside and condenses inside the house.",
        id="heat-1",
    ),
    Document(
        "A heat pump compressor raises the refrigerant pressure. Heat pumps are efficient in "
        "mild winters.",
        id="heat-2",
    ),
    Document(
        "Ground source heat pumps use boreholes; the refrigerant loop is buried.", id="heat-3"
    ),
    Document("Solar panels turn sunlight into electricity with photovoltaic silicon.", id="solar"),
    Document("Wind turbines turn wind into electricity; offshore farms are large.", id="wind"),
    Document("Hydropower dams store water and release it through turbines.", id="hydro"),
]
QUESTION = "How do heat pumps work?"


@pytest.fixture(scope="module")
def bm25() -> BM25Retriever:
    return BM25Retriever.from_documents(CORPUS, k=3)


class RunNames(BaseCallbackHandler):
    """Records the name of every chain run, and the root run's name."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.root: str | None = None

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        name = kwargs.get("name")
        self.names.append(name)
        if parent_run_id is None:
            self.root = name


# --------------------------------------------------------------------------------------------
# Pure functions
# --------------------------------------------------------------------------------------------


def test_inverse_document_frequency_matches_the_bm25_formula() -> None:
    assert offline.inverse_document_frequency(3, 10) == pytest.approx(
        math.log(1 + (10 - 3 + 0.5) / (3 + 0.5))
    )
    assert offline.inverse_document_frequency(1, 10) > offline.inverse_document_frequency(9, 10)


def test_expansion_terms_weigh_by_feedback_share_frequency_and_idf() -> None:
    feedback = [(["alpha", "beta", "beta", "gamma"], 3.0), (["beta", "delta"], 1.0)]
    frequencies = {"alpha": 1, "beta": 1, "gamma": 5, "delta": 1}
    # weights before idf: alpha .75*1/4, beta .75*2/4 + .25*1/2, gamma .75*1/4, delta .25*1/2
    terms = offline.expansion_terms(set(), feedback, frequencies.__getitem__, 10, 4)
    assert terms == ["beta", "alpha", "delta", "gamma"]
    assert offline.expansion_terms({"beta"}, feedback, frequencies.__getitem__, 10, 1) == ["alpha"]


def test_expansion_terms_skip_numbers_and_short_terms_and_break_ties_by_term() -> None:
    feedback = [(["95", "ci", "zeta", "eta1"], 1.0)]
    terms = offline.expansion_terms(set(), feedback, lambda term: 1, 10, 5)
    assert terms == ["eta1", "zeta"]


def test_keyword_phrases_are_adjacent_weighted_words_as_written_best_first() -> None:
    texts = [
        "Ground source heat pumps use boreholes. In winter the outside air is cold; "
        "the MRI scanner, outside, air",
        "Outside air heat pumps and ground source systems.",
    ]
    weights = {"ground": 1.0, "sourc": 1.0, "outsid": 2.0, "air": 2.0, "boreh": 0.5, "mri": 0.1}
    phrases = offline.keyword_phrases(texts, tokenize, weights)
    assert phrases[:2] == [
        ("outside air", ["outsid", "air"]),
        ("ground source", ["ground", "sourc"]),
    ]
    assert ("boreholes", ["borehol"]) not in phrases  # "borehol" is not a weighted term
    shown = [phrase for phrase, _ in phrases]
    assert "MRI" in shown  # acronyms keep their case
    used = [term for _, terms in phrases for term in terms]
    assert len(used) == len(set(used))  # no term repeated across phrases
    for phrase in shown:  # every phrase is written that way in a text (no punctuation inside)
        assert any(phrase.casefold() in text.casefold() for text in texts), phrase
    assert offline.keyword_phrases(texts, tokenize, {}) == []


def test_keyword_phrases_skip_code_colour_codes_and_one_off_word_pairs() -> None:
    texts = [
        'Commands: "delete_file", args: "file". Tree of Thoughts extends CoT by search.',
        "The planner prints \x1b[31mRED TEXT\x1b[0m on failure; task decomposition helps.",
        "Task decomposition splits a goal. CoT prompting and tree search.",
    ]
    weights = {term: 1.0 for term in ("delet", "file", "arg", "extend", "cot", "red", "text")}
    weights |= {"task": 1.0, "decomposit": 1.0}
    phrases = [phrase for phrase, _ in offline.keyword_phrases(texts, tokenize, weights)]
    assert phrases[0] == "task decomposition"  # a collocation, written twice
    assert "extends CoT" not in phrases  # a verb next to a noun, once
    assert not {"delete file", "31mRED", "31mRED TEXT", "red text"} & set(phrases)
    assert "delete" not in phrases and "args" in phrases  # the identifier gives no word


def test_feedback_queries_ignore_code_blocks_and_reference_lists() -> None:
    corpus = [
        Document(
            "Task decomposition breaks a hard task into smaller steps for the agent.\n"
            "```\ndelete_file(args) -> extends_cot\n```\n"
            'Commands: "delete_file", args: "file": "<file>"\n'
            "[1] Wei et al. “Chain of thought prompting elicits reasoning.” NeurIPS 2022",
            id="agent-1",
        ),
        Document(
            "Agents plan with task decomposition; each subgoal becomes smaller steps.", id="agent-2"
        ),
        Document("Heat pumps move heat with a compressor.", id="heat"),
    ]
    retriever = BM25Retriever.from_documents(corpus, k=2)
    queries = PseudoRelevanceFeedback(retriever=retriever, n=3).invoke("How do agents plan?")
    added = " ".join(query.removeprefix("How do agents plan? ") for query in queries)
    assert "task decomposition" in added or "smaller steps" in added
    for word in ("delete", "args", "file", "extends", "neurips", "wei"):
        assert word not in added.casefold(), queries


def test_expanded_queries_append_phrases_by_word_count() -> None:
    phrases = ["outside air", "refrigerant", "boreholes", "ground source heat"]
    assert offline.expanded_queries("q", phrases, n=5, terms_per_query=2) == [
        "q outside air",
        "q refrigerant, boreholes",
        "q ground source heat",
    ]
    assert offline.expanded_queries("q", phrases, n=1, terms_per_query=2) == ["q outside air"]
    assert offline.expanded_queries("q", [], n=3, terms_per_query=2) == []


def test_split_sentences_handles_paragraphs_western_and_cjk_ends() -> None:
    assert offline.split_sentences("Title\n\nOne. Two! 三。四？") == [
        "Title",
        "One.",
        "Two!",
        "三。",
        "四？",
    ]


def test_split_sentences_joins_wrapped_lines() -> None:
    wrapped = "The model was trained on\n2 trillion tokens. It was then\ntuned."
    assert offline.split_sentences(wrapped) == [
        "The model was trained on 2 trillion tokens.",
        "It was then tuned.",
    ]


def test_best_sentences_weigh_rare_terms_over_many_common_ones() -> None:
    question = "How much honey does a bee colony produce each year?"
    passages = [
        "Honey bees make honey every year, and each bee colony eats its honey in winter. "
        "A strong colony produces 15 to 25 kg of surplus honey.",
        "Bees keep honey in the colony for the year; honey bees need it.",
        "A bee colony grows every year in spring.",
        "Each year the bees of a colony gather honey.",
    ]
    terms = set(tokenize(question))
    shared = [
        len(terms & set(tokenize(sentence))) for sentence in offline.split_sentences(passages[0])
    ]
    assert shared[0] > shared[1]  # raw overlap would quote the first sentence
    chosen = offline.best_sentences(terms, passages, tokenize, count=1)
    assert chosen == [(0, "A strong colony produces 15 to 25 kg of surplus honey.")]


def test_best_sentences_cap_per_passage_skip_repeats_and_need_a_question_term() -> None:
    passages = ["Pumps move heat. Heat pumps use a compressor.", "Heat pumps use a compressor."]
    terms = set(tokenize("heat pump compressor"))
    chosen = offline.best_sentences(terms, passages, tokenize, count=3)
    assert chosen == [(0, "Heat pumps use a compressor.")]  # the same sentence is quoted once
    two = offline.best_sentences(terms, passages, tokenize, count=3, per_passage=2)
    assert two == [(0, "Heat pumps use a compressor."), (0, "Pumps move heat.")]
    assert offline.best_sentences({"absent"}, passages, tokenize, count=3) == []
    related = offline.best_sentences(
        {"absent"}, passages, tokenize, count=3, related_terms={"compressor"}
    )
    assert related == []  # the generated queries' terms only weigh, they never qualify


def test_related_terms_from_the_generated_queries_break_ties() -> None:
    passages = ["Heat pumps use a compressor.", "Heat pumps use boreholes."]
    terms = set(tokenize("heat pumps"))
    plain = offline.best_sentences(terms, passages, tokenize, count=1)
    assert plain == [(0, "Heat pumps use a compressor.")]  # the earlier passage on a tie
    guided = offline.best_sentences(
        terms, passages, tokenize, count=1, related_terms=set(tokenize("ground boreholes"))
    )
    assert guided == [(1, "Heat pumps use boreholes.")]


def test_passage_sentences_skip_tables_markup_and_keep_titles_apart() -> None:
    text = (
        "# Beekeeping notes\n\n"
        "Honey yield\n"
        "A strong hive yields 15 to 25 kg of honey a year.\n\n"
        "| month | kg |\n|---|---|\n| May | 5 |\n\n"
        "<div class='ad'>\n"
        "```\nprint('hive')\n```\n"
        "- Wax is a by-product.\n"
        "Weak colonies make less"
    )
    assert offline.passage_sentences(text) == [
        "A strong hive yields 15 to 25 kg of honey a year.",
        "Wax is a by-product.",
    ]  # the unfinished last line is a fragment, not a sentence
    beir = "Microstructural development of white matter\nAlterations of the white matter."
    assert offline.passage_sentences(beir, title="Microstructural development of white matter") == [
        "Alterations of the white matter."
    ]


@pytest.mark.parametrize(
    "text",
    [
        "Chain of thought (CoT; Wei et al. 2022) has become a standard technique.",
        "Chain of thought (CoT; Wei et al. [1]) is a standard technique.",
        "Many tools exist, e.g. search engines, i.e. programs that look things up.",
        "See Fig. 3 and item No. 5 for details.",
        "The value was 3.14 on average, up from 2.5 in 2020.",
        "J. R. R. Tolkien wrote the book in 1937.",
        "We used approx. 20 samples, as in Eq. (3).",
        "Prices rose by 2.5% in 2020 [3].",
    ],
)
def test_split_sentences_does_not_cut_at_abbreviations_numbers_initials_or_citations(
    text: str,
) -> None:
    assert offline.split_sentences(f"{text} The next sentence follows.") == [
        text,
        "The next sentence follows.",
    ]


@pytest.mark.parametrize(
    "line",
    [
        "- “LLM-powered Autonomous Agents”.",
        "arXiv preprint arXiv:2302.02676 (2023).",
        "Author, A., & Author, B. (2020). Title of the work. Journal of Examples, 12(3), 4-9.",
        "[1] Wei et al. “Chain of thought prompting elicits reasoning in large language models.” NeurIPS 2022",
        "A. Hyvarinen and E. Oja, “Fast Independent Component Analysis”, Neural Networks, 13(4-5), 2000, pp. 411-430.",
        "https://doi.org/10.1023/A:1010933404324",
        "https://lilianweng.github.io/posts/2023-06-23-agent/",
        "Weng, Lilian. (Jun 2023). “LLM-powered Autonomous Agents”. Lil’Log. https://lilianweng.github.io/posts/2023-06-23-agent/.",
    ],
)
def test_reference_list_entries_are_never_quoted(line: str) -> None:
    prose = "Agents plan their tasks with chain of thought prompting."
    assert offline.passage_sentences(f"{prose}\n{line}") == [prose]
    assert offline.passage_sentences(f"{prose}\n\n{line}") == [prose]


def test_a_wrapped_reference_list_item_is_dropped_whole() -> None:
    rst = (
        "The lemma bounds the distortion of a random projection.\n\n"
        "* Sanjoy Dasgupta and Anupam Gupta, 1999.\n"
        "  `An elementary proof of the Johnson-Lindenstrauss Lemma.\n"
        "  <https://citeseerx.ist.psu.edu/doc_view/pid/95cd464d>`_\n"
        "* Breunig, Kriegel, Ng, and Sander (2000)\n"
        "  `LOF: identifying density-based local outliers.\n"
        "  Proc. ACM SIGMOD\n"
        '* "Kernel principal component analysis."\n'
    )
    assert offline.passage_sentences(rst) == [
        "The lemma bounds the distortion of a random projection."
    ]


@pytest.mark.parametrize(
    "sentence",
    [
        "In their 2004 paper [1], O. Ledoit and M. Wolf propose a formula for the shrinkage.",
        "Wei et al. (2022) showed that chain of thought prompting helps large models.",
        "The Complement Naive Bayes classifier is described in Rennie et al. (2003).",
        "See https://example.com/guide for the full list of options.",
        "These diseases include leprosy and trachoma (Box 1) [2].",
        "Eysenbach compared citations in the Proceedings of the National Academy of Sciences, "
        "where articles face a six-month “toll-access” delay, and found more citations.",
    ],
)
def test_prose_citing_a_work_is_still_quoted(sentence: str) -> None:
    assert offline.passage_sentences(sentence) == [sentence]


@pytest.mark.parametrize(
    "fragment",
    [
        "and fed to a hasher with the tokens.",  # starts mid-sentence
        "The refrigerant is then compressed by the",  # cut at a chunk boundary
        "Wei, J., Wang, X., Schuurmans, D., and Zhou, D.",  # a list of authors
        "Lil’Log.",
        "def token_features(token, part_of_speech):",
        "hasher = FeatureHasher(input_type='string') is built.",
        "\x1b[31mRED TEXT\x1b[0m is printed here.",
    ],
)
def test_fragments_that_are_not_sentences_are_not_quoted(fragment: str) -> None:
    prose = "Heat pumps move heat with a refrigerant."
    assert offline.passage_sentences(f"{prose}\n\n{fragment}") == [prose]


def test_passage_sentences_of_html_text_keep_blocks_apart() -> None:
    # lines as ingest's HTML loader writes the scikit-learn user guide: one block per line
    text = (
        "2.5.7. Non-negative matrix factorization (NMF or NNMF)¶\n"
        "2.5.7.1. NMF with the Frobenius norm¶\n"
        "NMF finds two non-negative matrices whose product approximates the data.\n"
        "The Isomap algorithm comprises three stages:\n"
        "Nearest neighbor search. Isomap uses BallTree for efficient neighbor search.\n"
        "Revealing the structure at many scales on a single map\n"
        "Reducing the tendency to crowd points together at the center\n"
        "covariance.GraphicalLassoCV(*[, alphas, ...])\n"
        "Sparse inverse covariance w/ cross-validated choice of the l1 penalty.\n"
        "The estimator sklearn.covariance.OAS yields a smaller error than the formula."
    )
    assert offline.passage_sentences(text) == [
        "NMF finds two non-negative matrices whose product approximates the data.",
        "Nearest neighbor search.",
        "Isomap uses BallTree for efficient neighbor search.",
        "Sparse inverse covariance w/ cross-validated choice of the l1 penalty.",
        "The estimator sklearn.covariance.OAS yields a smaller error than the formula.",
    ]


def test_extractive_answer_on_a_blog_with_a_reference_list_quotes_only_prose() -> None:
    post = (
        "# Task Decomposition\n\n"
        "Chain of thought (CoT; Wei et al. 2022) has become a standard prompting technique "
        "for enhancing model performance on complex tasks.\n"
        "Tree of Thoughts (Yao et al. 2023) extends CoT by exploring multiple reasoning "
        "possibilities at each step.\n\n"
        "# References\n\n"
        "[1] Wei et al. “Chain of thought prompting elicits reasoning in large language models.” "
        "NeurIPS 2022\n"
        "[2] Yao et al. “Tree of Thoughts: Deliberate Problem Solving with Large Language Models.” "
        "arXiv preprint arXiv:2305.10601 (2023).\n"
    )
    lines = offline.extractive_answer(
        "chain of thought tree of thoughts", [Document(post)], tokenize, per_passage=3
    )
    assert lines[1:] == [
        "- Tree of Thoughts (Yao et al. 2023) extends CoT by exploring multiple reasoning "
        "possibilities at each step. [1]",
        "- Chain of thought (CoT; Wei et al. 2022) has become a standard prompting technique "
        "for enhancing model performance on complex tasks. [1]",
    ]


# --------------------------------------------------------------------------------------------
# Pseudo-relevance feedback
# --------------------------------------------------------------------------------------------


def test_document_frequency_comes_from_the_bm25_index(bm25: BM25Retriever) -> None:
    frequency = offline.bm25_document_frequency(bm25)
    for term in ("refriger", "turbin", "heat", "electr"):
        expected = sum(term in tokenize(document.page_content) for document in CORPUS)
        assert frequency(term) == expected
    assert frequency("absent-term") == 0


def test_feedback_queries_expand_with_terms_of_the_top_bm25_hits(bm25: BM25Retriever) -> None:
    generated = PseudoRelevanceFeedback(retriever=bm25, n=2, terms_per_query=2).invoke(QUESTION)
    assert len(generated) == 2
    feedback_words = set(re.findall(r"\w+", " ".join(d.page_content.lower() for d in CORPUS[:3])))
    other_words = set(re.findall(r"\w+", " ".join(d.page_content.lower() for d in CORPUS[3:])))
    for query in generated:
        assert query.startswith(QUESTION + " ")
        added = re.findall(r"\w+", query.removeprefix(QUESTION + " "))
        assert len(added) == 2
        assert set(added) <= feedback_words
        assert not set(added) & set(tokenize(QUESTION))
    feedback_text = " ".join(document.page_content.lower() for document in CORPUS[:3])
    for query in generated:  # phrases as the passages write them, comma-separated
        for phrase in query.removeprefix(QUESTION + " ").split(", "):
            assert phrase.lower() in feedback_text, phrase
    all_added = {
        word.strip(",") for query in generated for word in query.split()[len(QUESTION.split()) :]
    }
    assert "refrigerant" in all_added  # in all three feedback documents
    assert not all_added & (other_words - feedback_words)


def test_feedback_queries_are_deterministic_and_accept_both_input_forms(
    bm25: BM25Retriever,
) -> None:
    first = PseudoRelevanceFeedback(retriever=bm25, n=3).invoke(QUESTION)
    second = PseudoRelevanceFeedback(retriever=bm25, n=3).invoke({"question": QUESTION})
    assert first == second
    rebuilt = BM25Retriever.from_documents(list(reversed(CORPUS)), k=3)
    assert PseudoRelevanceFeedback(retriever=rebuilt, n=3).invoke(QUESTION) == first


def test_include_original_puts_the_question_first(bm25: BM25Retriever) -> None:
    generated = PseudoRelevanceFeedback(retriever=bm25, n=2, include_original=True).invoke(QUESTION)
    assert generated[0] == QUESTION
    assert len(generated) == 3


def test_no_feedback_gives_the_question_alone_with_a_warning(bm25: BM25Retriever) -> None:
    with pytest.warns(UserWarning, match="no expansion terms"):
        assert PseudoRelevanceFeedback(retriever=bm25).invoke("quantum chromodynamics") == [
            "quantum chromodynamics"
        ]


def test_generator_run_name_and_validation(bm25: BM25Retriever) -> None:
    names = RunNames()
    PseudoRelevanceFeedback(retriever=bm25).invoke(QUESTION, {"callbacks": [names]})
    assert names.root == "generate_queries"
    with pytest.raises(ValueError, match="n must be"):
        PseudoRelevanceFeedback(retriever=bm25, n=0)
    with pytest.raises(ValueError, match="question must not be empty"):
        PseudoRelevanceFeedback(retriever=bm25).invoke("  ")


def test_feedback_passage_quotes_feedback_sentences(bm25: BM25Retriever) -> None:
    passage = FeedbackPassage(retriever=bm25, sentences=2).invoke(QUESTION)
    assert passage
    for sentence in offline.split_sentences(passage):
        assert any(sentence in document.page_content for document in CORPUS[:3])
    with pytest.warns(UserWarning, match="question itself"):
        assert FeedbackPassage(retriever=bm25).invoke("quantum chromodynamics") == (
            "quantum chromodynamics"
        )


# --------------------------------------------------------------------------------------------
# Extractive answer
# --------------------------------------------------------------------------------------------


def test_extractive_answer_cites_the_passages_it_quotes() -> None:
    documents = [CORPUS[3], CORPUS[0], CORPUS[1]]
    answer = ExtractiveAnswer(sentences=3).invoke({"question": QUESTION, "documents": documents})
    first, *quoted = answer.split("\n")
    assert first.startswith(OFFLINE_LABEL)
    assert quoted
    for line in quoted:
        match = re.fullmatch(r"- (.+) \[(\d+)\]", line)
        assert match is not None, line
        sentence, number = match.group(1), int(match.group(2))
        assert 1 <= number <= len(documents)
        assert sentence in documents[number - 1].page_content
        assert set(tokenize(sentence)) & set(tokenize(QUESTION))
    assert "[1]" not in answer  # the solar passage shares no term with the question


def test_extractive_answer_keeps_titles_apart_skips_tables_and_uses_the_queries() -> None:
    documents = [
        Document(
            "Honey production\nBees make honey from nectar. Beekeepers check the hives weekly.",
            metadata={"title": "Honey production"},
        ),
        Document(
            "# Yields\n\n| year | kg honey per hive |\n|---|---|\n| 2020 | 25 |\n\n"
            "A strong hive yields 15 to 25 kg of honey per year."
        ),
    ]
    state = {"question": "How much honey does a hive give?", "documents": documents}
    lines = ExtractiveAnswer(sentences=2).lines(state)
    assert lines[1] == "- A strong hive yields 15 to 25 kg of honey per year. [2]"
    assert not any("|" in line or "Honey production" in line or "#" in line for line in lines)
    tied = {
        "question": "honey",
        "documents": [Document("Honey is sweet."), Document("Honey is nectar.")],
    }
    assert ExtractiveAnswer(sentences=1).lines(tied)[1].endswith("[1]")
    guided = ExtractiveAnswer(sentences=1).lines({**tied, "queries": ["honey", "honey nectar"]})
    assert guided[1] == "- Honey is nectar. [2]"


def test_extractive_answer_numbers_step_back_documents_after_the_question_documents() -> None:
    state = {
        "question": "refrigerant",
        "documents": [CORPUS[3]],
        "step_back_documents": [CORPUS[2]],
    }
    assert ExtractiveAnswer().invoke(state).endswith("[2]")


def test_extractive_answer_says_when_there_is_nothing_to_quote() -> None:
    empty = ExtractiveAnswer().invoke({"question": QUESTION, "documents": []})
    assert empty.startswith(OFFLINE_LABEL) and "No passages" in empty
    unrelated = ExtractiveAnswer().invoke({"question": QUESTION, "documents": [CORPUS[4]]})
    assert unrelated.startswith(OFFLINE_LABEL) and "shares a term" in unrelated


def test_extractive_answer_streams_line_by_line_under_the_answer_run_name() -> None:
    state = {"question": QUESTION, "documents": CORPUS[:3]}
    names = RunNames()
    chunks = list(ExtractiveAnswer().stream(state, {"callbacks": [names]}))
    assert len(chunks) == 4  # label and three quoted sentences
    assert "".join(chunks) == ExtractiveAnswer().invoke(state)
    assert names.root == "answer"
    with pytest.raises(TypeError, match="'question' and 'documents'"):
        ExtractiveAnswer().invoke({"question": QUESTION})


# --------------------------------------------------------------------------------------------
# Chains
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", strategies.STRATEGIES)
def test_offline_chain_runs_every_strategy(bm25: BM25Retriever, strategy: str) -> None:
    names = RunNames()
    chain = chains.chain_for(strategy, [bm25], top_n=3, return_sources=True)
    result = chain.invoke({"question": QUESTION}, {"callbacks": [names]})
    assert set(result) == {"answer", "queries", "documents", "failures"}
    assert result["answer"].startswith(OFFLINE_LABEL)
    # decomposition quotes each sub-question's 3 passages and the question's, each once
    assert 1 <= len(result["documents"]) <= (len(CORPUS) if strategy == "decomposition" else 6)
    assert all("fusion_score" in document.metadata for document in result["documents"])
    assert result["failures"] == []
    if strategy == "hyde":
        assert len(result["queries"]) == 1 and result["queries"][0] != QUESTION
    elif strategy != "decomposition":
        assert result["queries"][0] == QUESTION
    assert names.root == strategy
    assert {"generate_queries", "retrieve", "fuse", "format_context", "answer"} <= set(names.names)


def test_offline_chain_streams_the_answer_as_the_plain_chain_output(bm25: BM25Retriever) -> None:
    chain = chains.rag_fusion_chain([bm25])
    chunks = list(chain.stream(QUESTION))
    assert len(chunks) > 1
    assert "".join(chunks) == chain.invoke(QUESTION)


def test_feedback_retriever_is_found_inside_a_hybrid_retriever(bm25: BM25Retriever) -> None:
    class Nothing(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
            return []

    hybrid = hybrid_retriever(bm25, Nothing())
    assert offline.feedback_retriever([hybrid]) is bm25
    with pytest.raises(ValueError, match="BM25Retriever"):
        offline.feedback_retriever([Nothing()])
    with pytest.raises(ValueError, match="strategy must be one of"):
        chains.chain_for("telepathy", [bm25])


def test_the_step_back_query_step_leads_with_the_question() -> None:
    record = strategies.get("step-back")
    step_back = record.query_step(FakeListChatModel(responses=["How do heating systems work?"]))
    assert step_back.invoke(QUESTION) == [QUESTION, "How do heating systems work?"]
    assert list(step_back.stream(QUESTION))[0] == [QUESTION]  # searched before the model answers
    fusion = strategies.get("rag-fusion").query_step(
        FakeListChatModel(responses=["compressor\nrefrigerant"]), n=2, include_original=False
    )
    assert fusion.invoke(QUESTION) == ["compressor", "refrigerant"]


def test_chain_for_picks_the_model_chain_or_the_offline_chain(bm25: BM25Retriever) -> None:
    llm = FakeListChatModel(responses=["refrigerant cycle", "A model answer [1]"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with_model = chains.chain_for("rag-fusion", [bm25], llm, n=1, return_sources=True)
        result = with_model.invoke(QUESTION)
    assert result["answer"] == "A model answer [1]"
    assert result["queries"] == [QUESTION, "refrigerant cycle"]
    without = chains.chain_for("rag-fusion", [bm25], None, feedback=bm25)
    assert without.invoke(QUESTION).startswith(OFFLINE_LABEL)


def test_retrieval_pipeline_keeps_the_ranked_lists(bm25: BM25Retriever) -> None:
    state = retrieval_pipeline("multi-query", [bm25], n=2, top_n=4).invoke(QUESTION)
    assert len(state["retrieved"]) == len(state["queries"]) == 3
    assert [ranked.query for ranked in state["retrieved"]] == state["queries"]
    assert len(state["documents"]) <= 4
    # multi-query fuses by unique union: the score counts the lists holding the document
    assert all(document.metadata["fusion_score"] >= 1 for document in state["documents"])


# --------------------------------------------------------------------------------------------
# The same pipeline as with a model: per-call settings, schema, step names
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", strategies.STRATEGIES)
def test_offline_chains_honour_per_call_settings_and_publish_them(
    bm25: BM25Retriever, strategy: str
) -> None:
    chain = chains.chain_for(strategy, [bm25], return_sources=True)
    with_model = chains.chain_for(strategy, [bm25], FakeListChatModel(responses=["x"]))
    fields = set(chain.config_schema().model_json_schema()["$defs"]["Configurable"]["properties"])
    assert fields == {spec.id for spec in with_model.config_specs}
    assert fields == ({"n", "k", "top_n"} if strategies.get(strategy).counted else {"k", "top_n"})
    one = chain.invoke(QUESTION, config={"configurable": {"top_n": 1}})
    if strategy != "decomposition":  # one passage per sub-question there
        assert len(one["documents"]) == 1
    assert len(one["documents"]) < len(chain.invoke(QUESTION)["documents"]) or strategy == "hyde"


def test_offline_n_is_configurable_per_call(bm25: BM25Retriever) -> None:
    chain = chains.rag_fusion_chain([bm25], n=3, return_sources=True)
    assert len(chain.invoke(QUESTION, config={"configurable": {"n": 1}})["queries"]) == 2


def test_offline_answers_show_the_strategy(bm25: BM25Retriever) -> None:
    question = "How do heat pumps work and what do solar panels make?"
    answers = {
        strategy: chains.chain_for(strategy, [bm25], return_sources=True).invoke(question)
        for strategy in strategies.STRATEGIES
    }
    shown = ("rag-fusion", "decomposition", "step-back", "hyde")
    texts = [answers[strategy]["answer"] for strategy in shown]
    assert len(set(texts)) == len(texts), "two strategies gave the same offline answer"
    decomposition = answers["decomposition"]
    assert decomposition["queries"] == ["How do heat pumps work?", "What do solar panels make?"]
    assert "Sub-question 1: How do heat pumps work?" in decomposition["answer"]
    assert "Sub-question 2: What do solar panels make?" in decomposition["answer"]
    step_back = answers["step-back"]
    broader = step_back["queries"][1]
    heading = f"Broader question searched: {broader}"
    assert heading in step_back["answer"]
    assert step_back["answer"].split(heading)[1].strip().startswith("- ")  # what it retrieved
    hyde = answers["hyde"]
    assert f"Hypothetical passage searched: {hyde['queries'][0]}" in hyde["answer"]


def test_offline_sub_questions_of_one_clause_are_the_question_alone(bm25: BM25Retriever) -> None:
    assert OfflineSubQuestions(retriever=bm25, n=2).invoke(QUESTION) == [QUESTION]
    chain = chains.chain_for("decomposition", [bm25], return_sources=True)
    answer = chain.invoke(QUESTION)["answer"]
    assert SINGLE_CLAUSE_NOTE in answer and "Sub-question" not in answer
    assert answer.count(f"Question: {QUESTION}") == 1 and "\n- " in answer


@pytest.mark.parametrize(
    ("question", "parts"),
    [
        ("What is the difference between PCA and kernel PCA?", ["PCA", "kernel PCA"]),
        ("How does BM25 compare to dense retrieval?", ["BM25", "dense retrieval"]),
        ("Is ridge regression better than lasso?", ["ridge regression", "lasso"]),
        ("heat pumps versus solar panels", ["heat pumps", "solar panels"]),
    ],
)
def test_offline_sub_questions_split_a_comparison_into_its_sides(
    bm25: BM25Retriever, question: str, parts: list[str]
) -> None:
    expected = [f"What is {part}?" for part in parts]
    assert OfflineSubQuestions(retriever=bm25).invoke(question) == expected


def test_offline_sub_questions_split_clauses_only_before_a_question_word(
    bm25: BM25Retriever,
) -> None:
    clauses = OfflineSubQuestions(retriever=bm25).invoke(
        "What is task decomposition, and how do agents plan?"
    )
    assert clauses == ["What is task decomposition?", "How do agents plan?"]
    one = "Does birth weight and breast cancer risk correlate?"
    assert OfflineSubQuestions(retriever=bm25).invoke(one) == [one]
