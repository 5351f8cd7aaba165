"""Offline steps and answers: pure functions of (question, documents), over stock retrievers."""

from __future__ import annotations

import re

import pytest
from langchain_community.retrievers import BM25Retriever
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import InMemoryVectorStore

from rag_fusion_chain import offline
from rag_fusion_chain.offline import OFFLINE_LABEL, SINGLE_CLAUSE_NOTE
from rag_fusion_chain.retrievers.bm25 import tokenize

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
    Document("Batteries store electricity for the evening peak.", id="battery"),
    Document("Nuclear plants split uranium atoms in a reactor.", id="nuclear"),
]
QUESTION = "How do heat pumps work?"


@pytest.fixture(scope="module")
def hits() -> list[Document]:
    """The question's top 3 from LangChain's own BM25Retriever."""
    words = BM25Retriever.from_documents(CORPUS, k=3, preprocess_func=_words)
    return words.invoke(QUESTION)


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _added(queries: list[str], question: str = QUESTION) -> list[str]:
    return [query.removeprefix(question + " ") for query in queries]


# --------------------------------------------------------------------------------------------
# Sentences: what may be quoted
# --------------------------------------------------------------------------------------------


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


def test_passage_sentences_skip_headings_titles_tables_markup_and_code() -> None:
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


def test_a_long_unpunctuated_list_item_is_not_joined_to_the_next_block() -> None:
    # the two held-out failures on the scikit-learn user guide (HTML, one block per line)
    text = (
        "The Barnes-Hut t-SNE that has been implemented here is usually much slower than "
        "other manifold learning algorithms.\n"
        "Barnes-Hut can be used to embed hundred of thousands of data points while the exact "
        "method can handle thousands of samples before becoming computationally intractable\n"
        "The exact method is more accurate. It uses more memory.\n"
    )
    assert offline.passage_sentences(text) == [
        "The Barnes-Hut t-SNE that has been implemented here is usually much slower than "
        "other manifold learning algorithms.",
        "The exact method is more accurate.",
        "It uses more memory.",
    ]
    sidebar = "PrevUp Next\nscikit-learn 1.2.1\nOther versions\nPlease cite us if you use it."
    assert offline.passage_sentences(sidebar) == ["Please cite us if you use it."]


def test_the_docstring_examples_of_the_sentence_functions() -> None:
    """The examples the functions' docstrings used to carry, run."""
    text = "Title\n\nFirst one,\nwrapped. CoT (Wei et al. [1]) works. 第三句。第四句"
    assert offline.split_sentences(text) == [
        "Title",
        "First one, wrapped.",
        "CoT (Wei et al. [1]) works.",
        "第三句。",
        "第四句",
    ]
    reference = "Smith, A., & Lee, B. (2020). Deep nets. Journal of Things, 3(2)."
    assert offline.is_reference_entry(reference)
    assert not offline.is_reference_entry("In 2004, O. Ledoit and M. Wolf propose a formula [1].")
    quotable = [
        "Heat pumps move heat [2].",
        "and fed to a hasher.",
        "Wei, J., Le, Q., and Zhou, D.",
    ]
    quotable += ["Call x = f(y) now.", "Heat pumps move heat"]
    assert [offline.is_quotable(sentence) for sentence in quotable] == [True] + [False] * 4
    passage = "# Bees\n\n| kg | 20 |\n|---|---|\nA hive makes 20 kg a year.\n- Wax too."
    assert offline.passage_sentences(passage) == ["A hive makes 20 kg a year."]
    passages = ["Bees fly. A hive makes honey.", "Honey is sweet."]
    assert offline.best_sentences("hive honey", passages) == [
        (0, "A hive makes honey."),
        (1, "Honey is sweet."),
    ]


# --------------------------------------------------------------------------------------------
# Choosing sentences
# --------------------------------------------------------------------------------------------


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
    first, second = offline.split_sentences(passages[0])
    assert len(terms & set(tokenize(first))) > len(terms & set(tokenize(second)))
    assert offline.best_sentences(question, passages, count=1) == [(0, second)]


def test_best_sentences_take_one_per_passage_skip_repeats_and_need_a_question_term() -> None:
    passages = ["Pumps move heat. Heat pumps use a compressor.", "Heat pumps use a compressor."]
    chosen = offline.best_sentences("heat pump compressor", passages, count=3)
    assert chosen == [(0, "Heat pumps use a compressor.")]  # the same sentence is quoted once
    assert offline.best_sentences("absent", passages) == []
    # the searched queries' terms only weigh, they never qualify a sentence
    assert offline.best_sentences("absent", passages, related=["compressor"]) == []


def test_related_queries_break_ties() -> None:
    passages = ["Heat pumps use a compressor.", "Heat pumps use boreholes."]
    assert offline.best_sentences("heat pumps", passages, count=1) == [
        (0, "Heat pumps use a compressor.")
    ]
    guided = offline.best_sentences("heat pumps", passages, count=1, related=["boreholes"])
    assert guided == [(1, "Heat pumps use boreholes.")]


# --------------------------------------------------------------------------------------------
# Offline query steps over any retriever
# --------------------------------------------------------------------------------------------


def test_feedback_queries_add_phrases_of_the_retrieved_documents(hits: list[Document]) -> None:
    queries = offline.feedback_queries(QUESTION, hits, 2)
    assert len(queries) == 2
    feedback = " ".join(document.page_content.lower() for document in hits)
    for query in queries:
        assert query.startswith(QUESTION + " ")
        for phrase in query.removeprefix(QUESTION + " ").split(", "):
            assert phrase.lower() in feedback, phrase  # as the passages write it
            assert not set(tokenize(phrase)) & set(tokenize(QUESTION))
    assert "refrigerant" in " ".join(_added(queries))  # in all three feedback documents
    assert offline.feedback_queries(QUESTION, hits, 2) == queries  # deterministic


def test_feedback_queries_work_over_a_vector_store() -> None:
    store = InMemoryVectorStore.from_documents(CORPUS, DeterministicFakeEmbedding(size=16))
    found = store.as_retriever(search_kwargs={"k": 6}).invoke(QUESTION)
    queries = offline.feedback_queries(QUESTION, found, 3)
    assert 1 <= len(queries) <= 3
    words = set(re.findall(r"\w+", " ".join(d.page_content.lower() for d in CORPUS)))
    for added in _added(queries):
        assert set(re.findall(r"\w+", added.lower())) <= words
    # the statistics are the documents' texts: a passage two retrievers return counts once
    assert offline.feedback_queries(QUESTION, [*found, *found], 3) == queries


def test_feedback_queries_ignore_code_colour_codes_and_reference_lists() -> None:
    documents = [
        Document(
            "Task decomposition breaks a hard task into smaller steps for the agent.\n"
            "```\ndelete_file(args) -> extends_cot\n```\n"
            'Commands: "delete_file", args: "file": "<file>"\n'
            "The planner prints \x1b[31mRED TEXT\x1b[0m on failure.\n"
            "[1] Wei et al. “Chain of thought prompting elicits reasoning.” NeurIPS 2022"
        ),
        Document("Agents plan with task decomposition; each subgoal becomes smaller steps."),
        Document("Heat pumps move heat with a compressor."),
    ]
    queries = offline.feedback_queries("How do agents plan?", documents, 3)
    added = " ".join(_added(queries, "How do agents plan?")).casefold()
    assert "task decomposition" in added or "smaller steps" in added
    for word in ("delete", "args", "file", "extends", "neurips", "wei", "31mred", "red text"):
        assert word not in added, queries


def test_feedback_queries_fall_back_to_the_question_and_refuse_bad_input(
    hits: list[Document],
) -> None:
    with pytest.warns(UserWarning, match="no expansion terms"):
        assert offline.feedback_queries(QUESTION, [], 3) == [QUESTION]
    with pytest.raises(ValueError, match="n must be positive"):
        offline.feedback_queries(QUESTION, hits, 0)
    with pytest.raises(ValueError, match="question must not be empty"):
        offline.feedback_queries("  ", hits, 1)
    with pytest.raises(TypeError, match="documents must be a sequence"):
        offline.feedback_queries(QUESTION, "heat pumps", 1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("question", "parts"),
    [
        ("What is the difference between PCA and kernel PCA?", ["PCA", "kernel PCA"]),
        ("How does BM25 compare to dense retrieval?", ["BM25", "dense retrieval"]),
        ("Is ridge regression better than lasso?", ["ridge regression", "lasso"]),
        ("heat pumps versus solar panels", ["heat pumps", "solar panels"]),
    ],
)
def test_sub_questions_split_a_comparison_into_its_sides(question: str, parts: list[str]) -> None:
    assert offline.sub_questions(question, [], 3) == [f"What is {part}?" for part in parts]


def test_sub_questions_split_clauses_only_before_a_question_word(hits: list[Document]) -> None:
    two = "What is task decomposition, and how do agents plan?"
    assert offline.sub_questions(two, hits, 3) == [
        "What is task decomposition?",
        "How do agents plan?",
    ]
    assert offline.sub_questions(two, hits, 1) == ["What is task decomposition?"]
    one = "Does birth weight and breast cancer risk correlate?"
    assert offline.sub_questions(one, hits, 3) == [one]
    assert offline.sub_questions(QUESTION, hits, 3) == [QUESTION]


def test_broader_question_keeps_the_broad_words_and_adds_the_documents_terms(
    hits: list[Document],
) -> None:
    question = "How do heat pumps work with boreholes?"
    broader = offline.broader_question(question, hits)
    words = broader.split()
    assert "boreholes" not in words  # in one document of three: the narrow word goes
    assert {"heat", "pumps"} <= set(words)  # in all of them: the broad words stay
    assert set(words) - set(re.findall(r"\w+", question))  # and the documents add terms
    with pytest.warns(UserWarning, match="no documents"):
        assert offline.broader_question(question, []) == question


def test_hypothetical_passage_is_made_of_the_documents_best_sentences(
    hits: list[Document],
) -> None:
    passage = offline.hypothetical_passage(QUESTION, hits)
    sentences = offline.split_sentences(passage)
    assert 1 <= len(sentences) <= 3
    for sentence in sentences:
        assert any(sentence in document.page_content for document in hits)
    with pytest.warns(UserWarning, match="question"):
        assert offline.hypothetical_passage("quantum chromodynamics", hits) == (
            "quantum chromodynamics"
        )


def test_keyword_rewrite_is_the_questions_content_words_and_a_few_document_terms(
    hits: list[Document],
) -> None:
    words = offline.keyword_rewrite(QUESTION, hits).split()
    # no stopwords, as written, and only the words the hits use ("work" is in none)
    assert words[:2] == ["heat", "pumps"] and "work" not in words
    assert 1 <= len(words) - 2 <= 2 * offline.REWRITE_TERMS * 3
    assert "refrigerant" in words
    assert offline.keyword_rewrite(QUESTION, []) == "heat pumps work"
    assert offline.keyword_rewrite("What is it?", hits) == "What is it?"


def test_steps_do_not_mutate_their_input(hits: list[Document]) -> None:
    before = [document.model_copy(deep=True) for document in hits]
    offline.feedback_queries(QUESTION, hits, 2)
    offline.broader_question(QUESTION, hits)
    offline.keyword_rewrite(QUESTION, hits)
    offline.extractive_answer(QUESTION, hits)
    assert hits == before


# --------------------------------------------------------------------------------------------
# Answers that show what the strategy did
# --------------------------------------------------------------------------------------------


def _quotes(answer: str) -> list[tuple[str, int]]:
    return [
        (match[1], int(match[2]))
        for match in re.finditer(r"^- (.+) \[(\d+)\]$", answer, re.MULTILINE)
    ]


def test_extractive_answer_cites_the_passages_it_quotes() -> None:
    documents = [CORPUS[3], CORPUS[0], CORPUS[1]]
    answer = offline.extractive_answer(QUESTION, documents)
    assert answer.startswith(f"{OFFLINE_LABEL} {offline.OFFLINE_NOTE}")
    quotes = _quotes(answer)
    assert quotes and len(quotes) == len(answer.splitlines()) - 1
    for sentence, number in quotes:
        assert sentence in documents[number - 1].page_content
        assert set(tokenize(sentence)) & set(tokenize(QUESTION))
    assert "[1]" not in answer  # the solar passage shares no term with the question


def test_extractive_answer_skips_titles_and_tables_and_weighs_the_queries() -> None:
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
    answer = offline.extractive_answer("How much honey does a hive give?", documents)
    assert answer.splitlines()[1] == "- A strong hive yields 15 to 25 kg of honey per year. [2]"
    assert "|" not in answer and "Honey production" not in answer and "#" not in answer
    tied = [Document("Honey is sweet."), Document("Honey is nectar.")]
    assert _quotes(offline.extractive_answer("honey", tied))[0] == ("Honey is sweet.", 1)
    guided = offline.extractive_answer("honey", tied, ["honey", "honey nectar"])
    assert _quotes(guided)[0] == ("Honey is nectar.", 2)


def test_extractive_answer_of_a_blog_with_a_reference_list_quotes_only_prose() -> None:
    post = (
        "# Task Decomposition\n\n"
        "Chain of thought (CoT; Wei et al. 2022) has become a standard prompting technique "
        "for enhancing model performance on complex tasks.\n\n"
        "# References\n\n"
        "[1] Wei et al. “Chain of thought prompting elicits reasoning in large language models.” "
        "NeurIPS 2022\n"
        "[2] Yao et al. “Tree of Thoughts: Deliberate Problem Solving with Large Language Models.” "
        "arXiv preprint arXiv:2305.10601 (2023).\n"
    )
    tree = "Tree of Thoughts (Yao et al. 2023) extends CoT by exploring several paths at each step."
    answer = offline.extractive_answer(
        "chain of thought tree of thoughts", [Document(post), Document(tree)]
    )
    assert sorted(_quotes(answer)) == [
        (
            "Chain of thought (CoT; Wei et al. 2022) has become a standard prompting technique "
            "for enhancing model performance on complex tasks.",
            1,
        ),
        (tree, 2),
    ]


def test_extractive_answer_says_when_there_is_nothing_to_quote() -> None:
    empty = offline.extractive_answer(QUESTION, [])
    assert empty.startswith(OFFLINE_LABEL) and "No passages" in empty
    unrelated = offline.extractive_answer(QUESTION, [CORPUS[4]])
    assert unrelated.startswith(OFFLINE_LABEL) and "shares a term" in unrelated
    assert "of the 1 retrieved passage shares" in unrelated  # not "1 retrieved passages"
    assert "of the 2 retrieved passages shares" in offline.extractive_answer(QUESTION, CORPUS[4:6])


def test_hyde_and_rewrite_answers_show_what_was_searched(hits: list[Document]) -> None:
    hyde = offline.hyde_answer(QUESTION, "Heat pumps use a refrigerant.", hits)
    assert hyde.splitlines()[1] == "Hypothetical passage searched: Heat pumps use a refrigerant."
    rewrite = offline.rewrite_answer(QUESTION, "heat pumps work refrigerant", hits)
    assert rewrite.splitlines()[1] == "Rewritten query searched: heat pumps work refrigerant"
    for answer in (hyde, rewrite):
        assert answer.startswith(OFFLINE_LABEL) and _quotes(answer)
    assert "Hypothetical passage searched" in offline.hyde_answer(QUESTION, "p", [])


def test_step_back_answer_numbers_the_broader_questions_passages_on() -> None:
    documents, broader_documents = [CORPUS[0]], [CORPUS[0], CORPUS[2]]
    answer = offline.step_back_answer(
        QUESTION, documents, "heat pumps boreholes", broader_documents
    )
    lines = answer.splitlines()
    heading = lines.index("Broader question searched: heat pumps boreholes")
    assert all(number == 1 for _, number in _quotes("\n".join(lines[:heading])))
    below = _quotes("\n".join(lines[heading:]))
    assert ("Ground source heat pumps use boreholes; the refrigerant loop is buried.", 2) in below
    nothing = offline.step_back_answer(QUESTION, documents, "solar farms", [])
    assert nothing.endswith(
        "Broader question searched: solar farms\n- (nothing to quote beyond the passages above)"
    )
    assert offline.step_back_answer(QUESTION, documents, QUESTION, []) == (
        offline.extractive_answer(QUESTION, documents)
    )


def test_decomposition_answer_quotes_each_sub_question_then_the_question() -> None:
    question = "How do heat pumps work and what do solar panels make?"
    answered = [
        ("How do heat pumps work?", [CORPUS[0], CORPUS[1]]),
        ("What do solar panels make?", [CORPUS[3]]),
        (question, [CORPUS[1], CORPUS[3]]),
    ]
    answer = offline.decomposition_answer(question, answered)
    lines = answer.splitlines()
    assert lines[0].startswith(OFFLINE_LABEL)
    first = lines.index("Sub-question 1: How do heat pumps work?")
    second = lines.index("Sub-question 2: What do solar panels make?")
    last = lines.index(f"Question: {question}")
    assert first < second < last
    assert {number for _, number in _quotes("\n".join(lines[second:last]))} == {3}
    assert {number for _, number in _quotes(answer)} <= {1, 2, 3}  # each passage numbered once


def test_decomposition_answer_keeps_repeated_sub_questions_and_gathers_the_questions_own() -> None:
    question = "How do heat pumps work and what do solar panels make?"
    solar = "What do solar panels make?"
    answered = [
        (solar, [CORPUS[3]]),
        (f"  {question.upper()} ", [CORPUS[0], CORPUS[3]]),  # the question, as its own key
        (solar, [CORPUS[3].model_copy()]),  # an equal pair, not the same objects
        ("How do heat pumps work?", [CORPUS[1], CORPUS[0]]),
        (question, [CORPUS[1], CORPUS[2]]),
    ]
    assert offline.decomposition_answer(question, answered).splitlines() == [
        f"{OFFLINE_LABEL} Sub-questions answered in turn from their own passages.",
        f"Sub-question 1: {solar}",
        "- Solar panels turn sunlight into electricity with photovoltaic silicon. [1]",
        f"Sub-question 2: {solar}",
        "- Solar panels turn sunlight into electricity with photovoltaic silicon. [1]",
        "Sub-question 3: How do heat pumps work?",
        "- Heat pumps are efficient in mild winters. [2]",
        "- Heat pumps move heat with a compressor and a refrigerant. [3]",
        f"Question: {question}",  # its passages: both of its entries', in order
        "- Solar panels turn sunlight into electricity with photovoltaic silicon. [1]",
        "- Heat pumps move heat with a compressor and a refrigerant. [3]",
        "- Heat pumps are efficient in mild winters. [2]",
    ]


def test_decomposition_answer_of_one_clause_quotes_the_question_once() -> None:
    answer = offline.decomposition_answer(
        QUESTION, [(QUESTION, CORPUS[:2]), (QUESTION, CORPUS[1:3])]
    )
    assert answer.splitlines()[0] == f"{OFFLINE_LABEL} {SINGLE_CLAUSE_NOTE}"
    assert answer.count(f"Question: {QUESTION}") == 1 and "Sub-question" not in answer
    assert _quotes(answer)
    assert "No passages" in offline.decomposition_answer(QUESTION, [(QUESTION, [])])
