"""Retrieval quality of the shipped wiki on realistic agent questions (gpu_wiki/eval_queries.json).

precision@3 = |top-3 ∩ relevant| / min(3, |relevant|): a query with one relevant document scores 1
when it is anywhere in the top 3 (the agent reads the top hits, so its rank within them matters
little), a query with three needs all three there. recall@5 = |top-5 ∩ relevant| / |relevant|.
Both are averaged over the queries; the test fails below 0.8 mean precision@3."""

import json
from pathlib import Path

import pytest

from atrex_mcp.wiki.index import WikiIndex

WIKI = Path(__file__).resolve().parent.parent / "gpu_wiki"
QUERIES = json.loads((WIKI / "eval_queries.json").read_text())["queries"]


def precision_at_3(hits: list[str], relevant: list[str]) -> float:
    return len(set(hits[:3]) & set(relevant)) / min(3, len(relevant))


def recall_at_5(hits: list[str], relevant: list[str]) -> float:
    return len(set(hits[:5]) & set(relevant)) / len(relevant)


@pytest.fixture(scope="module")
def wiki(tmp_path_factory):
    return WikiIndex(wiki_root=WIKI, state_dir=tmp_path_factory.mktemp("state"))


def test_query_set_is_usable(wiki):
    assert len(QUERIES) >= 30
    for q in QUERIES:
        for doc_id in q["relevant"]:
            wiki.read(doc_id)  # raises for an unknown id


def test_precision_and_recall(wiki):
    p3 = r5 = 0.0
    for q in QUERIES:
        hits = [h.doc_id for h in wiki.search(q["query"], limit=5)]
        p3 += precision_at_3(hits, q["relevant"])
        r5 += recall_at_5(hits, q["relevant"])
    p3, r5 = p3 / len(QUERIES), r5 / len(QUERIES)
    print(f"\nwiki retrieval over {len(QUERIES)} queries: precision@3 = {p3:.3f}, recall@5 = {r5:.3f}")
    assert p3 >= 0.8, f"precision@3 {p3:.3f} < 0.8 (recall@5 {r5:.3f})"


@pytest.mark.parametrize(
    "query, kernel",
    [
        ("rms norm triton kernel", "kernels/rms_norm"),
        ("rms norm triton kernel h200", "kernels/rms_norm"),
        ("fused moe triton kernel", "kernels/fused_moe"),
        ("paged attention decode triton kernel", "kernels/paged_attention_decode"),
        ("layer_norm kernel", "kernels/layer_norm"),
    ],
)
def test_an_operator_named_in_words_finds_its_kernel(wiki, query, kernel):
    """The validated kernel of the operator a query names, with spaces or underscores, comes before
    the kernels of operators that merely share its words (fused_add_rms_norm, gated_rms_norm)."""
    hits = [h.doc_id for h in wiki.search(query, limit=3)]
    assert kernel in hits, hits
    kernels = [h for h in hits if h.startswith("kernels/")]
    assert kernels[0] == kernel, hits
