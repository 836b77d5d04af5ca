"""The wiki kernels of the two MoE routing operators and the two chunked delta-rule stages against
their references on tiny hand-built cases the scored shapes do not reach: an expert with no
tokens, every token on one expert, ids outside [0, E), several tiles of ids, lengths that are not
a multiple of the chunk, one head, a shared key head, batch entries on scattered pool slots.
Integer outputs must match exactly; floating ones within a tolerance far tighter than the judge's
(and the judge's own comparison must pass too)."""

import importlib.util
from pathlib import Path

import pytest
import torch

from atrex_mcp.evaluate.compare import compare_outputs
from atrex_mcp.problemset.catalog import Catalog

ROOT = Path(__file__).resolve().parent.parent
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def catalog():
    return Catalog()


def _pair(catalog, op: str, init: dict):
    """(reference model, wiki kernel model) built with the same init parameters."""
    kernel = _module(ROOT / "gpu_wiki" / "kernels" / f"{op}.py", f"wiki_{op}")
    return catalog.load_reference(op)(**init), kernel.Model(**init)


def _assert_same(op: str, ref, got, rel: float = 0.0) -> None:
    ref = ref if isinstance(ref, dict) else {"out": ref}
    got = got if isinstance(got, dict) else {"out": got}
    assert sorted(got) == sorted(ref)
    for name, r in ref.items():
        g = got[name]
        assert g.dtype == r.dtype and g.shape == r.shape, (name, g.dtype, g.shape, r.dtype, r.shape)
        if r.dtype.is_floating_point:
            r64, g64 = r.double().cpu(), g.double().cpu()
            bound = rel * r64.abs() + 1e-3 * r64.abs().max()
            assert ((g64 - r64).abs() <= bound).all(), (name, (g64 - r64).abs().max().item())
        else:
            assert torch.equal(g.cpu(), r.cpu()), name
    verdict = compare_outputs(ref, got, op)
    assert verdict.ok, verdict.message


def _ids(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int32, device=DEVICE)


ROUTING_CASES = {
    "one token, eight experts": (dict(num_experts=128, block_size=128), _ids([[5, 99, 0, 127, 64, 3, 2, 1]])),
    "every slot on one expert": (dict(num_experts=8, block_size=4), _ids([[3, 3]] * 6)),
    "empty experts between used ones": (dict(num_experts=6, block_size=4), _ids([[5, 0], [0, 5], [5, 5], [0, 2]])),
    "repeated expert within a token": (dict(num_experts=4, block_size=2), _ids([[1, 1, 1], [2, 1, 2]])),
    "ids outside [0, E)": (dict(num_experts=4, block_size=4), _ids([[0, 4], [-1, 3], [7, 0], [3, 3]])),
    "exact multiple of the block": (dict(num_experts=2, block_size=4), _ids([[0, 1]] * 4)),
}


@pytest.mark.parametrize("case", ROUTING_CASES)
@pytest.mark.parametrize("op", ["moe_count_and_sort", "moe_align_block_size"])
def test_routing_kernels_match_the_reference(catalog, op, case):
    init, topk_ids = ROUTING_CASES[case]
    reference, kernel = _pair(catalog, op, init)
    _assert_same(op, reference(topk_ids), kernel(topk_ids))


@pytest.mark.parametrize("op", ["moe_count_and_sort", "moe_align_block_size"])
def test_routing_kernels_over_several_tiles_of_ids(catalog, op):
    """More ids than one program's tile (4096): ranks and offsets carry across tiles."""
    generator = torch.Generator().manual_seed(7)
    topk_ids = torch.randint(0, 3, (1100, 8), generator=generator, dtype=torch.int32).to(DEVICE)
    topk_ids[:40] = 1  # a long run of one expert across the first tile
    reference, kernel = _pair(catalog, op, dict(num_experts=3, block_size=16))
    _assert_same(op, reference(topk_ids), kernel(topk_ids))


OUTPUT_CASES = {
    "ragged last chunk, two batches, shared q/k head": dict(batch_size=2, token_count=70, num_q_heads=1, num_v_heads=2),
    "one head, one short chunk": dict(batch_size=1, token_count=9, num_q_heads=1, num_v_heads=1),
    "exact chunks, more q heads than value heads": dict(batch_size=1, token_count=128, num_q_heads=2, num_v_heads=1),
}


@pytest.mark.parametrize("case", OUTPUT_CASES)
def test_chunk_delta_rule_output_matches_the_reference(catalog, case):
    op = "chunk_delta_rule_output"
    make_inputs = catalog.load_make_inputs(op)
    x = make_inputs(seed=3, device=DEVICE, key_dim=32, value_dim=32, chunk_size=64, **OUTPUT_CASES[case])
    reference, kernel = _pair(catalog, op, dict(chunk_size=64, scale=None))
    _assert_same(op, reference(**x), kernel(**x), rel=1e-2)


def test_chunk_delta_rule_output_honours_an_explicit_scale(catalog):
    op = "chunk_delta_rule_output"
    x = catalog.load_make_inputs(op)(
        seed=4,
        device=DEVICE,
        batch_size=1,
        token_count=40,
        num_q_heads=1,
        num_v_heads=2,
        key_dim=32,
        value_dim=64,
        chunk_size=64,
    )
    reference, kernel = _pair(catalog, op, dict(chunk_size=64, scale=0.5))
    _assert_same(op, reference(**x), kernel(**x), rel=1e-2)


STATE_CASES = {
    "ragged last chunk, two batches on scattered slots": dict(
        batch_size=2, token_count=70, num_k_heads=1, num_v_heads=2, state_count=5
    ),
    "one head, one short chunk": dict(batch_size=1, token_count=10, num_k_heads=1, num_v_heads=1, state_count=3),
    "exact chunks, more key heads than value heads": dict(
        batch_size=1, token_count=128, num_k_heads=2, num_v_heads=1, state_count=2
    ),
}


@pytest.mark.parametrize("case", STATE_CASES)
def test_chunk_gated_delta_rule_state_matches_the_reference(catalog, case):
    op = "chunk_gated_delta_rule_state"
    x = catalog.load_make_inputs(op)(seed=5, device=DEVICE, key_dim=32, value_dim=32, **STATE_CASES[case])
    reference, kernel = _pair(catalog, op, dict(chunk_size=64))
    before = x["initial_state"].clone()
    _assert_same(op, reference(**x), kernel(**x), rel=1e-2)
    assert torch.equal(x["initial_state"], before), "the kernel must not write its input pool"


def test_chunk_gated_delta_rule_state_every_column_block_is_correct(catalog):
    """The tile table's column split (BV) changes only how the state is partitioned across programs."""
    op = "chunk_gated_delta_rule_state"
    x = catalog.load_make_inputs(op)(
        seed=6,
        device=DEVICE,
        batch_size=1,
        token_count=80,
        num_k_heads=1,
        num_v_heads=1,
        key_dim=32,
        value_dim=32,
        state_count=2,
    )
    reference, kernel = _pair(catalog, op, dict(chunk_size=64))
    expected = reference(**x)
    for column_block in (16, 32):
        kernel.column_block = column_block
        _assert_same(op, expected, kernel(**x), rel=1e-2)
