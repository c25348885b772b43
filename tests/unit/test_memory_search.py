"""Memory search in the core: tokens, BM25, the hashing embedder, fusion, fields, filters."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.store.base.embed import get_text_at_path
from langgraph.store.memory import _compare_values

from sessionstream.core.memory.search import (
    Bm25Index,
    HashingEmbedder,
    Hit,
    VectorIndex,
    cosine,
    fuse,
    index_texts,
    matches,
    tokenize,
)

MEMORIES = {
    "lang": "The user prefers answers in French",
    "seat": "Books a window seat on every flight",
    "fy": "The team's fiscal year starts in April",
    "units": "Always reply in metric units",
    "zh": "用户喜欢靠窗的座位",
}


def test_words_are_case_folded_and_cjk_runs_become_bigrams() -> None:
    assert tokenize("Prefers FRENCH, ok42") == ["prefers", "french", "ok42"]
    assert tokenize("喜欢靠窗 seat") == ["喜欢", "欢靠", "靠窗", "seat"]
    assert tokenize("窗") == ["窗"]
    assert tokenize("ｆｕｌｌwidth") == ["fullwidth"]  # NFKC


def test_bm25_ranks_the_memory_sharing_the_rare_words_first() -> None:
    index = Bm25Index()
    for doc_id, text in MEMORIES.items():
        index.add(doc_id, [text])
    assert index.search("which seat on a flight", k=2)[0].id == "seat"
    assert index.search("靠窗座位")[0].id == "zh"
    assert [h.id for h in index.search("fiscal year", among=["lang", "units"])] == []
    index.remove("seat")
    assert "seat" not in index and all(h.id != "seat" for h in index.search("seat flight"))
    assert index.search("") == [] and index.search("nothing-matches-this") == []


def test_bm25_after_removals_equals_a_fresh_index() -> None:
    grown, fresh = Bm25Index(), Bm25Index()
    for doc_id, text in MEMORIES.items():
        grown.add(doc_id, [text])
    grown.add("lang", ["Answers in Italian"])  # re-index replaces
    grown.remove("fy")
    for doc_id, text in MEMORIES.items():
        if doc_id != "fy":
            fresh.add(doc_id, ["Answers in Italian" if doc_id == "lang" else text])
    for query in ("answers in italian", "window flight", "metric", "座位"):
        assert grown.search(query) == fresh.search(query)


def test_ties_are_broken_by_id_so_every_reader_ranks_alike() -> None:
    index = Bm25Index()
    for doc_id in ("b", "a", "c"):
        index.add(doc_id, ["same words"])
    assert [h.id for h in index.search("same")] == ["a", "b", "c"]


def test_the_hashing_embedder_is_deterministic_normalised_and_lexically_close() -> None:
    one, two = HashingEmbedder(64), HashingEmbedder(64)
    v = one.embed(["window seat please"])[0]
    assert v == two.embed(["window seat please"])[0]  # no per-process hash seed
    assert math.isclose(sum(x * x for x in v), 1.0)
    near = cosine(v, one.embed(["a window seat"])[0])
    far = cosine(v, one.embed(["fiscal year in April"])[0])
    assert near > far
    assert one.name == "hashing-v1-64" and one.dims == 64
    assert one.embed([""])[0] == [0.0] * 64


def test_vectors_and_fusion() -> None:
    emb = HashingEmbedder(128)
    vectors = VectorIndex(128)
    lexical = Bm25Index()
    for doc_id, text in MEMORIES.items():
        vectors.add(doc_id, emb.embed([text]))
        lexical.add(doc_id, [text])
    query = "windw seat"  # a typo: the trigrams still meet
    by_vector = vectors.search(emb.embed([query])[0], k=3)
    assert by_vector[0].id == "seat"
    fused = fuse([lexical.search(query), by_vector], k=2)
    assert fused[0].id == "seat"
    assert fuse([[Hit("a", 9.0)], [Hit("b", 1.0)]]) == [Hit("a", 1 / 61), Hit("b", 1 / 61)]
    with pytest.raises(ValueError, match="dimensions"):
        vectors.add("x", [[1.0, 2.0]])


VALUES: list[Any] = [
    {"text": "hello", "meta": {"title": "T", "n": 3}, "tags": ["a", "b", "c"],
     "items": [{"body": "x"}, {"body": "y"}, {"other": 1}], "flag": True, "none": None},
    "plain string",
    {"deep": [[1, 2], [3]], "num": 2.5},
]
PATHS = ["$", "text", "meta.title", "meta", "meta.n", "tags[0]", "tags[-1]", "tags[*]",
         "items[*].body", "items[1].body", "missing", "tags[9]", "flag", "none",
         "deep[0]", "num"]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("path", PATHS)
def test_index_paths_read_what_langgraph_reads(value: Any, path: str) -> None:
    if path == "$" and isinstance(value, str):
        assert index_texts(value, [path]) == [value]  # a string memory indexes as itself
        return
    assert index_texts(value, [path]) == get_text_at_path(value, path)


scalars = st.one_of(st.integers(-5, 5), st.sampled_from(["a", "b", "1"]), st.booleans(),
                    st.none(), st.floats(-3, 3, allow_nan=False))
filters = st.dictionaries(
    st.sampled_from(["x", "y"]),
    st.one_of(scalars, st.lists(scalars, max_size=2),
              st.dictionaries(st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]),
                              st.one_of(st.integers(-5, 5), st.floats(-3, 3,
                                                                      allow_nan=False)),
                              min_size=1, max_size=2)),
    max_size=2)
documents = st.dictionaries(st.sampled_from(["x", "y", "z"]),
                            st.one_of(scalars, st.lists(scalars, max_size=2)), max_size=3)


@settings(max_examples=300, deadline=None)
@given(documents, filters)
def test_filters_decide_as_langgraph_decides(doc: dict[str, Any], flt: dict[str, Any]) -> None:
    try:
        expected = all(_compare_values(doc.get(k), v) for k, v in flt.items())
    except (TypeError, ValueError):
        expected = False  # LangGraph raises comparing a non-number; we do not match it
    assert matches(doc, flt) == expected
