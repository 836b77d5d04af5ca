"""The wiki index on a small synthetic corpus: ids, filters, highlights, incremental refresh,
added roots, errors, and the CLI's JSON form."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from atrex_mcp.errors import AtrexError
from atrex_mcp.wiki.index import WikiIndex
from atrex_mcp.wiki.roots import add_root, load_roots

ROOT = Path(__file__).resolve().parent.parent


def _doc(title, category, body, *, tags=(), op_family=("any",), dsl=("any",), hardware=("any",)):
    def toml_list(values):
        return "[" + ", ".join(json.dumps(v) for v in values) + "]"

    return (
        textwrap.dedent(f"""\
        +++
        title = {json.dumps(title)}
        category = "{category}"
        tags = {toml_list(tags)}
        op_family = {toml_list(op_family)}
        dsl = {toml_list(dsl)}
        hardware = {toml_list(hardware)}
        sources = ["A source — https://example.org"]
        +++
        """)
        + body
    )


KERNEL = '''"""
+++
title = "Toy scale kernel"
operator = "toy_scale"
op_family = ["activation"]
dsl = ["triton"]
hardware = ["any"]
tags = ["elementwise"]
sources = ["Triton tutorials — https://triton-lang.org"]
validated_shapes = ["smoke"]
+++
Multiplies by two; one program per block.
"""
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
'''


@pytest.fixture
def wiki(tmp_path):
    root = tmp_path / "gpu_wiki"
    (root / "docs" / "patterns").mkdir(parents=True)
    (root / "docs" / "pitfalls").mkdir(parents=True)
    (root / "kernels").mkdir()
    (root / "docs" / "patterns" / "split-k.md").write_text(
        _doc(
            "Split-K for skinny GEMMs",
            "patterns",
            "Cut the reduction dimension K into SPLIT_K slices when M is small.\n\n"
            "Use `tl.atomic_add` or a workspace.\n",
            tags=["split-k", "gemm"],
            op_family=["gemm"],
            dsl=["triton"],
            hardware=["hopper"],
        )
    )
    (root / "docs" / "pitfalls" / "fp8.md").write_text(
        _doc(
            "fp8 saturation",
            "pitfalls",
            "Casting to e4m3fn does not saturate: values above 464 become NaN.\n",
            tags=["fp8"],
            op_family=["quant"],
            dsl=["cuda"],
            hardware=["h20"],
        )
    )
    (root / "kernels" / "toy_scale.py").write_text(KERNEL)
    return root, tmp_path / "state"


def test_ids_hits_and_highlights(wiki):
    root, state = wiki
    ix = WikiIndex(wiki_root=root, state_dir=state)
    assert ix.last_refresh.added == 3
    hits = ix.search("how do I split the K dimension of a skinny gemm?")
    assert hits[0].doc_id == "docs/patterns/split-k"
    assert "**" in hits[0].snippet and hits[0].op_family == ["gemm"]
    kernel = ix.search("toy scale elementwise")[0]
    assert (kernel.doc_id, kernel.kind, kernel.category) == ("kernels/toy_scale", "kernel", "kernels")
    assert "toy_scale" in kernel.tags


def test_identifier_parts_are_searchable(wiki):
    root, state = wiki
    ix = WikiIndex(wiki_root=root, state_dir=state)
    assert ix.search("atomic")[0].doc_id == "docs/patterns/split-k"  # from `tl.atomic_add`
    assert ix.search("scale_kernel")[0].doc_id == "kernels/toy_scale"  # code field


def test_filters(wiki):
    root, state = wiki
    ix = WikiIndex(wiki_root=root, state_dir=state)
    assert [h.doc_id for h in ix.search("saturate split", category="pitfalls")] == ["docs/pitfalls/fp8"]
    assert [h.doc_id for h in ix.search("saturate split", dsl="cuda")] == ["docs/pitfalls/fp8"]
    assert [h.doc_id for h in ix.search("saturate split", op_family="gemm")] == ["docs/patterns/split-k"]
    # h200 admits documents written for Hopper in general, not those for another part
    assert [h.doc_id for h in ix.search("saturate split", hardware="h200")] == ["docs/patterns/split-k"]
    with pytest.raises(AtrexError) as err:
        ix.search("x", category="nonsense")
    assert err.value.info.category == "unknown_wiki_category"
    with pytest.raises(AtrexError) as err:
        ix.search("x", op_family="normalisation")
    assert err.value.info.category == "unknown_op_family" and "norm" in err.value.info.hint


def test_incremental_refresh(wiki):
    root, state = wiki
    WikiIndex(wiki_root=root, state_dir=state)
    again = WikiIndex(wiki_root=root, state_dir=state).last_refresh
    assert (again.added, again.updated, again.removed, again.unchanged) == (0, 0, 0, 3)

    doc = root / "docs" / "pitfalls" / "fp8.md"
    os.utime(doc, ns=(doc.stat().st_atime_ns, doc.stat().st_mtime_ns + 10**9))  # touched, same content
    assert WikiIndex(wiki_root=root, state_dir=state).last_refresh.updated == 0

    doc.write_text(doc.read_text().replace("NaN", "NaN; clamp to 448 first"))
    (root / "kernels" / "toy_scale.py").unlink()
    ix = WikiIndex(wiki_root=root, state_dir=state)
    assert (ix.last_refresh.updated, ix.last_refresh.removed) == (1, 1)
    assert ix.search("clamp")[0].doc_id == "docs/pitfalls/fp8"
    assert ix.search("toy elementwise") == []


def test_read_and_unknown_id(wiki):
    root, state = wiki
    ix = WikiIndex(wiki_root=root, state_dir=state)
    doc = ix.read("docs/patterns/split-k")
    # The front matter travels as fields only; the text is the article itself.
    assert doc.title == "Split-K for skinny GEMMs" and doc.text.startswith("Cut the reduction dimension K")
    assert "+++" not in doc.text and "title =" not in doc.text
    assert doc.sources == ["A source — https://example.org"] and doc.path == "docs/patterns/split-k.md"
    assert doc.tags == ["split-k", "gemm"] and doc.op_family == ["gemm"] and doc.hardware == ["hopper"]
    # A kernel is a Python file: read whole, since its front matter also holds the validated shapes.
    kernel = ix.read("kernels/toy_scale")
    assert kernel.text.startswith('"""\n+++') and 'validated_shapes = ["smoke"]' in kernel.text
    with pytest.raises(AtrexError) as err:
        ix.read("docs/patterns/splitk")
    assert err.value.info.category == "unknown_wiki_doc" and "docs/patterns/split-k" in err.value.info.hint


def test_a_kernel_named_by_its_operator_ranks_above_its_namesakes(wiki):
    root, state = wiki
    (root / "kernels" / "toy_scale_add.py").write_text(
        KERNEL.replace('"toy_scale"', '"fused_toy_scale_add"')
        .replace("Toy scale kernel", "Toy scale and add kernel")
        .replace("Multiplies by two", "Toy scale then add: multiplies a toy scale by two, scales, adds")
    )
    ix = WikiIndex(wiki_root=root, state_dir=state)
    assert ix.search("fused toy scale add kernel")[0].doc_id == "kernels/toy_scale_add"  # named too: words decide
    for query in ("toy scale triton kernel", "toy_scale kernel", "how do I write TOY SCALE"):
        assert ix.search(query)[0].doc_id == "kernels/toy_scale", query


def test_bad_front_matter_is_reported(wiki):
    root, state = wiki
    (root / "docs" / "patterns" / "broken.md").write_text('+++\ntitle = "no category"\n+++\nbody\n')
    with pytest.raises(AtrexError) as err:
        WikiIndex(wiki_root=root, state_dir=state)
    assert err.value.info.category == "bad_wiki_doc" and "category" in err.value.info.message


def test_added_root_is_indexed_as_source(wiki, tmp_path):
    root, state = wiki
    upstream = tmp_path / "upstream"
    (upstream / "csrc").mkdir(parents=True)
    (upstream / "csrc" / "layernorm.cu").write_text(
        "__global__ void rms_norm_kernel(float* out) { /* warp reduce */ }\n"
    )
    (upstream / ".git").mkdir()
    (upstream / ".git" / "notes.md").write_text("rms_norm_kernel\n")
    (upstream / "image.png").write_bytes(b"\x89PNG")
    add_root(state, upstream, name="up")
    assert [r.name for r in load_roots(state)] == ["up"]
    ix = WikiIndex(wiki_root=root, state_dir=state)
    hits = ix.search("rms_norm_kernel warp reduce", category="source")
    assert [h.doc_id for h in hits] == ["up/csrc/layernorm.cu"]
    assert hits[0].dsl == ["cuda"] and ix.read("up/csrc/layernorm.cu").kind == "source"
    with pytest.raises(AtrexError):
        add_root(state, upstream, name="docs")


def test_cli_json(wiki):
    root, state = wiki
    env = {**os.environ, "ATREX_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}
    code = (
        f"import atrex_mcp.wiki.index as i, pathlib; i.wiki_dir = lambda: pathlib.Path({str(root)!r})\n"
        "from atrex_mcp.cli import main; import sys; sys.exit(main(sys.argv[1:]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, "wiki", "search", "fp8 NaN", "--json", "--limit", "1"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    hits = json.loads(out.stdout)
    assert [h["doc_id"] for h in hits] == ["docs/pitfalls/fp8"] and hits[0]["category"] == "pitfalls"
    bad = subprocess.run([sys.executable, "-c", code, "wiki", "read", "nope"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown_wiki_doc" in bad.stderr


def _open_and_count(args):
    root, state = args
    return len(WikiIndex(wiki_root=Path(root), state_dir=Path(state)).search("fp8 split gemm", limit=10))


def test_concurrent_first_opens_build_one_index(wiki):
    import multiprocessing

    root, state = wiki
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        counts = pool.map(_open_and_count, [(str(root), str(state))] * 3)
    assert counts == [2, 2, 2]
    assert WikiIndex(wiki_root=root, state_dir=state).last_refresh.unchanged == 3
