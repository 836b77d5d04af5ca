"""The wiki's two fused-MoE kernels against their references on hand-built routings the generated
shapes rarely hit: experts with no tokens, one expert with every token, top-1 and top-k, token
counts that are not a multiple of the block, ids outside [0, E), the routing-free decode path,
and (fp8) hidden and intermediate sizes that are not a multiple of the 128-wide scale block.
Outputs are judged by the evaluator's own rule. Without a GPU the kernels run under Triton's
interpreter, so every case is tiny; the GPU tile measurement must refuse a CPU in one line."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from atrex_mcp.evaluate.compare import compare_outputs

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before the kernels' @triton.jit runs

ROOT = Path(__file__).resolve().parent.parent
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def moe():
    return (
        _load(ROOT / "gpu_wiki/kernels/fused_moe.py", "wiki_fused_moe"),
        _load(ROOT / "problems/fused_moe/reference.py", "ref_fused_moe"),
    )


@pytest.fixture(scope="module")
def fp8_moe():
    return (
        _load(ROOT / "gpu_wiki/kernels/fp8_blockscale_fused_moe.py", "wiki_fp8_moe"),
        _load(ROOT / "problems/fp8_blockscale_fused_moe/reference.py", "ref_fp8_moe"),
    )


def _ids(T: int, k: int, experts: list[int], gen: torch.Generator) -> torch.Tensor:
    """(T, k) ids drawn from the given experts only (the others get no token)."""
    pick = torch.randint(0, len(experts), (T, k), generator=gen)
    return torch.tensor(experts, dtype=torch.int32)[pick]


def _weights(T: int, k: int, gen: torch.Generator) -> torch.Tensor:
    return torch.softmax(torch.randn(T, k, generator=gen), dim=-1)


def _judge(ref, out, op: str) -> None:
    verdict = compare_outputs(ref.cpu(), out.cpu(), op)
    assert verdict.ok, verdict.message


# (T, D, I, E, k, experts that get tokens; None = all)
MOE_CASES = {
    "one expert has every token, top-1": (19, 64, 32, 8, 1, [3]),
    "two of eight experts, top-2, T not a multiple of BM": (21, 96, 48, 8, 2, [0, 5]),
    "routing-free decode path (T*k <= E/4)": (1, 64, 32, 16, 2, None),
    "id outside [0, E) contributes nothing": (9, 64, 32, 4, 3, [0, 2, 4, -1]),
}


@pytest.mark.parametrize("case", MOE_CASES, ids=list(MOE_CASES))
def test_fused_moe_matches_reference(case, moe):
    kernel, reference = moe
    T, D, I, E, k, experts = MOE_CASES[case]
    gen = torch.Generator().manual_seed(7)
    x = (torch.randn(T, D, generator=gen) * 0.1).bfloat16()
    w1 = (torch.randn(E, 2 * I, D, generator=gen) * D**-0.5).bfloat16()
    w2 = (torch.randn(E, D, I, generator=gen) * I**-0.5).bfloat16()
    ids = _ids(T, k, experts if experts is not None else list(range(E)), gen)
    inputs = [t.to(DEVICE) for t in (x, w1, w2, _weights(T, k, gen), ids)]
    init = {"num_experts": E, "intermediate_size": I, "top_k": k}
    ref = reference.Model(**init)(*inputs)
    out = kernel.Model(**init)(*inputs)
    assert out.dtype == torch.float32 and out.shape == (T, D)
    _judge(ref, out, "fused_moe")


def _fp8_blocks(rows: int, cols: int, gen: torch.Generator, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Random e4m3fn codes (RMS ~100) and positive 128x128 block scales near scale/100 (the last
    blocks may be partial): dequantised values of RMS ~scale, as the generator draws them."""
    codes = (torch.randn(rows, cols, generator=gen) * 100).clamp(-448, 448).to(torch.float8_e4m3fn)
    scales = (torch.rand(-(-rows // 128), -(-cols // 128), generator=gen) + 0.5) * scale / 100
    return codes, scales


FP8_CASES = {
    "one expert has every token, top-1": (13, 256, 128, 8, 1, [6]),
    "three of eight experts, top-3, T not a multiple of BM": (11, 256, 128, 8, 3, [1, 4, 7]),
    "routing-free decode path (T*k <= E/4)": (1, 128, 128, 16, 2, None),
    "hidden and intermediate not multiples of 128, id outside [0, E)": (5, 200, 96, 4, 2, [0, 3, 4]),
}


@pytest.mark.parametrize("case", FP8_CASES, ids=list(FP8_CASES))
def test_fp8_blockscale_fused_moe_matches_reference(case, fp8_moe):
    kernel, reference = fp8_moe
    T, D, I, E, k, experts = FP8_CASES[case]
    gen = torch.Generator().manual_seed(11)
    x = (torch.randn(T, D, generator=gen) * 100).clamp(-448, 448).to(torch.float8_e4m3fn)
    a_scale = (torch.rand(T, -(-D // 128), generator=gen) + 0.5) * 3e-3
    w1, s1 = zip(*(_fp8_blocks(2 * I, D, gen, 1.0) for _ in range(E)))
    w2, s2 = zip(*(_fp8_blocks(D, I, gen, 1.0) for _ in range(E)))
    pool = experts if experts is not None else list(range(E))
    if experts is None:  # distinct experts per token, as the generator draws them
        ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)]).to(torch.int32)
    else:
        ids = _ids(T, k, pool, gen)
    inputs = [
        t.to(DEVICE)
        for t in (
            x,
            torch.stack(w1),
            torch.stack(w2),
            _weights(T, k, gen),
            ids,
            a_scale,
            torch.stack(s1),
            torch.stack(s2),
        )
    ]
    init = {"num_experts": E, "intermediate_size": I, "top_k": k}
    ref = reference.Model(**init)(*inputs)
    out = kernel.Model(**init)(*inputs)
    assert out.dtype == torch.float8_e4m3fn and out.shape == (T, D)
    assert ref.float().abs().median() > 1.0  # the case produces real outputs, not near-zero codes
    _judge(ref, out, "fp8_blockscale_fused_moe")


@pytest.mark.parametrize("n_pairs", [300, 2100], ids=["one chunk, one launch", "three chunks"])
@pytest.mark.parametrize("which", ["moe", "fp8_moe"])
def test_routing_places_every_pair_once_in_single_expert_blocks(which, n_pairs, request):
    """Every valid pair lands in exactly one live row, every block holds one expert, and ids
    outside [0, E) are left out — within one 1024-pair chunk and across chunks."""
    kernel, _ = request.getfixturevalue(which)
    E, bm = 6, 16
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(-1, E + 1, (n_pairs // 2, 2), generator=gen, dtype=torch.int32)  # includes -1 and E
    ids[: n_pairs // 3, 0] = 2  # one expert far above the rest
    pair_ids, block_expert, block_live = (t.cpu() for t in kernel.route(ids.to(DEVICE), E, bm))
    flat = ids.reshape(-1)
    seen = []
    for b, e in enumerate(block_expert.tolist()):
        if e < 0:
            continue
        rows = pair_ids[b * bm : b * bm + block_live[b]].long()
        assert 1 <= block_live[b] <= bm
        assert (flat[rows] == e).all()
        seen += rows.tolist()
    valid = ((flat >= 0) & (flat < E)).nonzero().squeeze(1).tolist()
    assert sorted(seen) == valid


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU refusal of the GPU measurement")
def test_tile_measurement_refuses_without_a_gpu_in_one_line(tmp_path):
    out = tmp_path / "tiles.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "measurements/moe_kernel_tiles.py"), "--out", str(out)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "needs a CUDA GPU" in done.stderr
    assert not out.exists()
