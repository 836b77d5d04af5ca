"""The unified_attention wiki kernel against the problem's reference, on tiny batches built with the problem's
own input generator (shuffled block table) or by hand: head dims 64 to 256, GQA ratios 1 to 16, mixed
sequence lengths in one launch, causal and unmasked (q_len < kv_len) sequences. Judged by the evaluator's
own comparison, plus a tighter bound (a bf16 output whose typical value is ~0.1 passes atol = 1e-2 too easily).
Runs the kernel under the Triton interpreter on CPU."""

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from atrex_mcp.evaluate.compare import compare_outputs

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = ROOT / "problems" / "unified_attention"
KERNEL_PATH = ROOT / "gpu_wiki" / "kernels" / "unified_attention.py"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def kernel(monkeypatch_module):
    return _load("wiki_unified_attention", KERNEL_PATH)


@pytest.fixture(scope="module")
def monkeypatch_module():
    """The interpreter is chosen when triton.jit decorates, so it must be set before the module loads."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TRITON_INTERPRET", "1")
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def problem():
    return _load("ua_reference", PROBLEM / "reference.py"), _load("ua_input", PROBLEM / "input.py")


def _inputs(problem, seq_lens, hq, hkv, d, seed=0):
    _, make = problem
    return make.make_inputs(
        seed=seed,
        num_seqs=len(seq_lens),
        seq_lens=seq_lens,
        num_query_heads=hq,
        num_kv_heads=hkv,
        head_size=d,
        block_size=16,
    )


def _check(problem, out: torch.Tensor, inputs: dict) -> None:
    reference, _ = problem
    ref = reference.Model()(**inputs)
    verdict = compare_outputs(ref, out, "unified_attention")
    assert verdict.ok, verdict.message or verdict.details
    err = (out.double() - ref.double()).abs()
    bound = ref.double().abs() * 2**-6 + 2**-7  # two bf16 ulps of the output, plus P rounded to bf16
    assert bool((err <= bound).all()), f"max error {err.max().item():.4g} beyond two bf16 ulps"
    assert err.mean().item() < 3e-3, "a systematic error (one key too many or too few) shows in the mean"


@pytest.mark.parametrize(
    ("seq_lens", "hq", "hkv", "d"),
    [
        ([1, 7, 16, 17, 37], 4, 4, 64),  # G = 1, every length class in one batch
        ([37, 1, 16], 8, 2, 72),  # G = 4, D = 72 = 64 + 16 (8 masked): the smoke shape
        ([17, 7], 16, 1, 80),  # G = 16, D = 80 = 64 + 16
        ([16, 1, 37], 10, 1, 128),  # G = 10: 12 tokens x 10 heads, 8 idle rows per tile
        ([7, 17], 2, 1, 192),  # D = 192 = 128 + 64
        ([37, 1, 7, 16, 17], 8, 2, 256),  # G = 4, D = 256 (smaller tile)
        ([150], 2, 2, 64),  # a sequence past one 128-row tile: the mask-free key loop runs
    ],
    ids=lambda v: "-".join(map(str, v)) if isinstance(v, list) else str(v),
)
@pytest.mark.parametrize("regime", ["short", "long"])
def test_matches_reference_with_the_shipped_tiles(kernel, problem, seq_lens, hq, hkv, d, regime):
    """Each batch with the tile and schedule the kernel ships for its head dim in either regime (these tiny
    batches are "short"; "long" forces that regime's tile and the q_tiles schedule)."""
    inputs = _inputs(problem, seq_lens, hq, hkv, d)
    assert not torch.equal(inputs["block_table"][0, :2], torch.arange(2, dtype=torch.int32))  # shuffled pages
    if regime == "short":
        assert kernel.regime(sum(seq_lens), len(seq_lens)) == "short"
        out = kernel.Model()(**inputs)
    else:
        out = kernel.unified_attention(**inputs, tile=kernel.tile_for(d, 49152, 1), schedule="q_tiles")
    _check(problem, out, inputs)


def test_small_tiles_cross_many_pages_and_diagonals(kernel, problem):
    """16-row tiles and 16-key steps: several mask-free tiles, diagonal tiles, page edges, GQA rows."""
    inputs = _inputs(problem, [37, 1, 16, 17, 7], 8, 2, 72, seed=3)
    out = kernel.unified_attention(**inputs, tile=kernel.Tile(16, 16, 4, 1))
    _check(problem, out, inputs)


@pytest.mark.parametrize("schedule", ["q_tiles", "per_sequence"])
def test_hand_built_table_unmasked_and_empty_sequences(kernel, problem, schedule):
    """q_len < kv_len (the reference drops the mask), an empty query sequence, a query without keys
    (kv_len 0: zeros), and a causal sequence, reading shuffled pages in reverse order from a table wider
    than needed."""
    torch.manual_seed(0)
    hq, hkv, d, bs = 4, 1, 64, 16
    q_lens, kv_lens = [5, 0, 3, 20], [40, 9, 0, 20]
    pages = [(n + bs - 1) // bs for n in kv_lens]
    num_blocks = sum(pages) + 3
    order = torch.randperm(num_blocks).to(torch.int32)
    table = torch.zeros(len(q_lens), max(pages) + 2, dtype=torch.int32)
    used = 0
    for i, n in enumerate(pages):
        table[i, :n] = order[used : used + n].flip(0)
        used += n
    cu = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    inputs = {
        "q": torch.randn(sum(q_lens), hq, d).to(torch.bfloat16),
        "k_cache": torch.randn(num_blocks, bs, hkv, d).to(torch.bfloat16),
        "v_cache": torch.randn(num_blocks, bs, hkv, d).to(torch.bfloat16),
        "cu_seqlens_q": cu,
        "seqused_k": torch.tensor(kv_lens, dtype=torch.int32),
        "block_table": table,
    }
    out = kernel.unified_attention(**inputs, schedule=schedule)
    assert out[5:8].abs().max() == 0  # the query sequence without keys: softmax over nothing
    # The reference divides by kv_len, so it is judged on the batch without that sequence.
    keep = [0, 1, 3]
    without = {
        **inputs,
        "q": torch.cat([inputs["q"][:5], inputs["q"][8:]]),
        "cu_seqlens_q": torch.tensor([0, 5, 5, 25], dtype=torch.int32),
        "seqused_k": inputs["seqused_k"][keep],
        "block_table": table[keep],
    }
    _check(problem, torch.cat([out[:5], out[8:]]), without)


@pytest.mark.parametrize("schedule", ["q_tiles", "per_sequence"])
def test_every_schedule_on_a_mixed_batch(kernel, problem, schedule):
    """A 150-token sequence among short ones with 16-token tiles: per_sequence programs loop over several q
    tiles of their sequence (7 chunks, the mean sequence's tiles, for its 19 tiles), q_tiles programs search."""
    inputs = _inputs(problem, [150, 1, 7], 4, 2, 64, seed=5)
    tile = kernel.Tile(16, 16, 4, 1)
    assert kernel.per_sequence_chunks(158, 3, 2, 8) == 7  # G = 2: 8 tokens a tile, mean 53 tokens
    _check(problem, kernel.unified_attention(**inputs, tile=tile, schedule=schedule), inputs)


def test_unknown_schedule_is_refused_in_one_line(kernel, problem):
    inputs = _inputs(problem, [3], 2, 1, 64)
    with pytest.raises(ValueError, match=r"unknown schedule 'rows'; choose one of q_tiles, per_sequence$"):
        kernel.unified_attention(**inputs, schedule="rows")


def _few_key_rows_batch(kernel, length: int = 48, d: int = 64, bs: int = 16):
    """One causal sequence whose rows 2 and 17 attend (almost) only keys 1 and 2 with weights 1 and p, p chosen
    as far from the bf16 grid as the kernel's own fp32 softmax allows, and v1 = -bf16(8p), v2 = 8: the output
    there is 8(p - bf16(8p)/8)/(1 + p) ~ -0.009, a cancellation that bf16(P) cannot resolve. Every other row
    attends keys with V ~ 0.01, so the output RMS is ~4e-3 and the judge's atol (0.05·RMS) ~2e-4, as on a
    long sequence where most rows average thousands of keys. Row 2 lies in the masked diagonal loop, row 17
    (with 16-token tiles) in the mask-free loop of its tile."""
    scale = torch.tensor(d**-0.5 * kernel._LOG2E, dtype=torch.float32)

    def rounding(w: torch.Tensor) -> float:  # |p - bf16(p)| in half-ulps of p in [0.5, 1)
        p = torch.exp2((320 + w.float()) * scale - 320 * scale)
        return float((p - p.to(torch.bfloat16).float()).abs() / 2**-9)

    w = max(torch.arange(-2.6, -2.0, 1 / 64).to(torch.bfloat16).unique(), key=rounding)
    assert rounding(w) > 0.9
    p = float(torch.exp2((320 + w.float()) * scale - 320 * scale))
    q, k, v = torch.zeros(length, 1, d), torch.zeros(length, 1, d), torch.zeros(length, 1, d)
    q[:, 0, 2] = k[:, 0, 2] = 30  # score 112 between every pair of "background" tokens
    k[1:3, 0, 2] = 0
    k[1:3, 0, 0] = 16
    k[2, 0, 1] = w  # score(row, key 2) - score(row, key 1) = w / 8, so P(key 2) / P(key 1) = p
    v[:, 0] = 0.01 * torch.randn(length, d, generator=torch.Generator().manual_seed(0))
    v[1, 0], v[2, 0] = -8 * p, 8
    for row in (2, 17):
        q[row, 0] = 0
        q[row, 0, 0], q[row, 0, 1] = 20, 1
    pages = -(-length // bs)
    order = torch.randperm(pages + 2, generator=torch.Generator().manual_seed(1)).to(torch.int32)
    k_cache, v_cache = torch.zeros(pages + 2, bs, 1, d), torch.zeros(pages + 2, bs, 1, d)
    padded = pages * bs - length
    k_cache[order[:pages].long()] = torch.nn.functional.pad(k, (0, 0, 0, 0, 0, padded)).view(pages, bs, 1, d)
    v_cache[order[:pages].long()] = torch.nn.functional.pad(v, (0, 0, 0, 0, 0, padded)).view(pages, bs, 1, d)
    return {
        "q": q.bfloat16(),
        "k_cache": k_cache.bfloat16(),
        "v_cache": v_cache.bfloat16(),
        "cu_seqlens_q": torch.tensor([0, length], dtype=torch.int32),
        "seqused_k": torch.tensor([length], dtype=torch.int32),
        "block_table": order[None, :pages].contiguous(),
    }


@pytest.mark.parametrize(
    ("tile", "schedule"),
    [
        (None, None),  # the shipped tile: all 48 rows in one masked diagonal tile
        ((16, 16, 4, 1), "q_tiles"),  # row 17 in the mask-free loop of the second q tile
        ((16, 16, 4, 1), "per_sequence"),
    ],
    ids=["shipped", "q_tiles-16", "per_sequence-16"],
)
def test_rows_over_few_keys_keep_p_precise(kernel, problem, tile, schedule):
    """bf16(P) before the P·V dot fails the judge's tolerance on rows that see few keys when the output is
    small elsewhere (the H200 failures: single long sequences, an early token, one element); splitting P into
    bf16 hi + lo parts passes. split_p=False (plain bf16 P) must reproduce the failure."""
    reference, _ = problem
    inputs = _few_key_rows_batch(kernel)
    ref = reference.Model()(**inputs)
    assert float(ref.double().pow(2).mean().sqrt()) < 5e-3 and abs(float(ref[2, 0, 0])) > 5e-3
    opts = {"tile": kernel.Tile(*tile) if tile else None, "schedule": schedule}
    coarse = compare_outputs(ref, kernel.unified_attention(**inputs, **opts, split_p=False), "unified_attention")
    assert not coarse.ok and "[2, 0, 0]" in coarse.message  # the failure mode, reproduced with bf16(P)
    out = kernel.unified_attention(**inputs, **opts)
    verdict = compare_outputs(ref, out, "unified_attention")
    assert verdict.ok, verdict.message
    # Few keys send row 17's whole tile through the masked, split loop; with few_keys=0 its keys 0..15 stay in
    # the mask-free loop and only the diagonal is split.
    if tile:
        diagonal_only = kernel.unified_attention(**inputs, **opts, few_keys=0)
        assert float((diagonal_only[2].double() - ref[2].double()).abs().max()) < 2e-4
        assert not compare_outputs(ref, diagonal_only, "unified_attention").ok
    for row in (2, 17):
        assert float((out[row].double() - ref[row].double()).abs().max()) < 2e-4


def test_tile_table_covers_every_scored_head_dim(kernel):
    for d in (64, 72, 80, 128, 192, 256):
        da, db = kernel.split_head_dim(d)
        assert da + db >= d and da & (da - 1) == 0 and (db == 0 or db >= 16)
        for n_tokens, num_seqs in ((256 * 3095, 3095), (49152, 1)):  # many short sequences, one long one
            tile = kernel.tile_for(d, n_tokens, num_seqs)
            assert tile.block_n % 16 == 0  # a key tile is a whole number of 16-slot pages
            smem = 2 * (tile.block_m * (da + db) + tile.num_stages * 2 * tile.block_n * (da + db))
            assert smem <= 228 * 1024, (d, tile, smem)
    assert kernel.regime(256 * 3095, 3095) == "short" and kernel.regime(49152, 1) == "long"


def test_forward_never_syncs_with_the_host():
    """No .item()/.tolist()/.cpu() in the launch path: the grid comes from tensor shapes."""
    tree = ast.parse(KERNEL_PATH.read_text())
    calls = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    assert not calls & {"item", "tolist", "cpu", "numpy", "synchronize"}


def test_tuning_script_refuses_clearly_without_a_gpu(tmp_path):
    script = ROOT / "measurements" / "unified_attention_tiles.py"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    env.pop("TRITON_INTERPRET", None)

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(script), *argv], capture_output=True, text=True, env=env, check=False
        )

    helped = run("--help")
    assert helped.returncode == 0 and "--out" in helped.stdout
    bad = run("--shapes", "0,x")
    assert bad.returncode == 2 and "--out" in bad.stderr  # argparse: --out is required
    unknown = run("--shapes", "0,99", "--out", str(tmp_path / "t.json"))
    assert unknown.returncode == 2 and "unknown ids ['99']" in unknown.stderr
    ran = run("--out", str(tmp_path / "t.json"))
    assert ran.returncode == 2
    assert ran.stderr.strip().splitlines()[-1].startswith("error: unified_attention_tiles: no CUDA GPU")
    assert "Traceback" not in ran.stderr and not (tmp_path / "t.json").exists()
