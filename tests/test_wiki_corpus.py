"""The shipped wiki: every document and kernel parses, sits in the folder of its category,
cites sources, and links only to documents that exist; the index over it answers."""

import re
from pathlib import Path

import pytest

from atrex_mcp.wiki.corpus import CATEGORIES, READERS, wiki_files
from atrex_mcp.wiki.index import WikiIndex

WIKI = Path(__file__).resolve().parent.parent / "gpu_wiki"
LINK = re.compile(r"\]\(((?:docs|kernels)/[A-Za-z0-9_./-]+)\)")


@pytest.fixture(scope="module")
def entries():
    return {f.doc_id: READERS[f.kind](f) for f in wiki_files(WIKI)}


def test_counts(entries):
    docs = [e for e in entries.values() if e.kind == "doc"]
    kernels = [e for e in entries.values() if e.kind == "kernel"]
    assert len(docs) >= 60 and len(kernels) >= 15
    assert {e.category for e in docs} == set(CATEGORIES)


def test_front_matter_is_complete(entries):
    for doc_id, e in entries.items():
        assert e.title and e.sources and e.op_family and e.dsl and e.hardware, doc_id
        if e.kind == "doc":
            assert doc_id.split("/")[1] == e.category, f"{doc_id} is filed under the wrong category"
            assert e.tags, doc_id


def test_links_resolve(entries):
    broken = [
        (doc_id, target)
        for doc_id, e in entries.items()
        for target in LINK.findall(e.body + e.code)
        if target not in entries
    ]
    assert not broken, broken


def test_real_corpus_index(tmp_path):
    ix = WikiIndex(wiki_root=WIKI, state_dir=tmp_path)
    hits = ix.search("split-K for skinny GEMM", limit=3)
    assert hits[0].doc_id == "docs/patterns/split-k"
    kernel = ix.search("rms_norm", category="kernels", limit=1)[0]
    assert kernel.doc_id == "kernels/rms_norm" and ix.read(kernel.doc_id).text.startswith('"""')
