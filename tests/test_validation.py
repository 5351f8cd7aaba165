"""validation: the helpers every layer shares (question and count checks live beside their users' tests)."""

import pytest

from rag_fusion_chain.validation import require_extra


def test_a_missing_optional_dependency_names_the_extra_that_installs_it() -> None:
    with pytest.raises(
        ImportError,
        match=r'no_such_module_xyz is not installed: pip install "rag-fusion-chain\[bm25\]"',
    ):
        require_extra("no_such_module_xyz", "bm25")
    assert require_extra("json", "core").loads("[1]") == [1]
