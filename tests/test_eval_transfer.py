"""The output hand-over between worker and judge (sandbox.handoff → evaluate.transfer): what the
worker copies into the shared arena comes back bit for bit, and every way a hostile worker could
bend the arena or the manifest is refused with a runtime-stage category, never trusted, and can
neither fault the judge's process nor change an output after it was taken."""

from __future__ import annotations

import errno
import os
import random
import subprocess
import sys

import pytest
import torch

from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.evaluate.compare import check_structure
from atrex_mcp.evaluate.transfer import OutputArena, OutputRejected, arena_bytes
from sandbox.handoff import ALIGN, ArenaWriter, layout

BIG = 1 << 30


@pytest.fixture
def arena():
    arena = OutputArena(cuda=False)
    yield arena
    arena.close()


def _hand_over(arena, value, room=None):
    """What a worker does: copy `value` into an arena the judge sized (for `room`, or for value)."""
    size = arena.reserve(arena_bytes(value if room is None else room))
    return ArenaWriter(arena.fd, cuda=False).write(value, size)


def _same(a, b):
    """Equal dtype, shape and bytes (fp8 has no torch.equal)."""
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    )


@pytest.mark.parametrize(
    "value",
    [
        torch.randn(3, 5, dtype=torch.bfloat16),
        torch.randn(7, 9).t(),  # not contiguous: handed over in C order of its logical shape
        torch.tensor(2.5),  # 0-dim
        torch.empty(0, 4, dtype=torch.float16),
        torch.tensor([True, False, True]),
        torch.randn(4, 8).to(torch.float8_e4m3fn),
    ],
)
def test_a_tensor_comes_back_bit_for_bit(arena, value):
    back, written = arena.load(_hand_over(arena, value), "cpu", BIG)
    assert written and type(back) is torch.Tensor and back.is_contiguous() and _same(back, value.contiguous())


def test_tuples_and_dicts_keep_their_structure(arena):
    q, s = torch.randint(-128, 127, (4, 16), dtype=torch.int8), torch.rand(4, 1)
    back, _ = arena.load(_hand_over(arena, [q, s]), "cpu", BIG)
    assert isinstance(back, tuple) and torch.equal(back[0], q) and torch.equal(back[1], s)
    back, _ = arena.load(_hand_over(arena, {"ids": q, "w": s}), "cpu", BIG)
    assert list(back) == ["ids", "w"] and torch.equal(back["w"], s)


def _rejected(arena, manifest, category=tx.WRONG_OUTPUT_TYPE, max_bytes=BIG):
    with pytest.raises(OutputRejected) as info:
        arena.load(manifest, "cpu", max_bytes)
    assert (info.value.stage, info.value.category) == (tx.RUNTIME, category), info.value.message
    return info.value.message


@pytest.mark.parametrize(
    "manifest",
    [
        None,
        [],
        "tensor",
        {"structure": "pickle", "tensors": []},
        {"structure": "tensor", "tensors": []},
        {"structure": "tensor", "tensors": [{"dtype": "float32", "shape": [1]}] * 2},
        {"structure": "tuple", "tensors": [{"dtype": "float32", "shape": [1]}] * 65},
        {"structure": "tensor", "tensors": [{"dtype": "object", "shape": [1]}]},
        {"structure": "tensor", "tensors": [{"dtype": "qint8", "shape": [1]}]},
        {"structure": "tensor", "tensors": [{"dtype": "float32", "shape": [-1]}]},
        {"structure": "tensor", "tensors": [{"dtype": "float32", "shape": [1.5]}]},
        {"structure": "tensor", "tensors": [{"dtype": "float32", "shape": [True]}]},
        {"structure": "tensor", "tensors": [{"dtype": "float32", "shape": [1] * 17}]},
        {"structure": "tensor", "tensors": [{"dtype": "float32", "shape": "4"}]},
        {"structure": "dict", "tensors": [{"dtype": "float32", "shape": [1]}]},
        {"structure": "tuple", "tensors": [{"key": "a", "dtype": "float32", "shape": [1]}]},
        {"structure": "dict", "tensors": [{"key": "a", "dtype": "float32", "shape": [1]}] * 2},
        {"structure": "tensor", "tensors": ["float32"]},
    ],
)
def test_a_malformed_manifest_is_refused(arena, manifest):
    _hand_over(arena, torch.zeros(1))
    _rejected(arena, manifest)


def test_an_output_far_larger_than_the_reference_is_refused_before_reading(arena):
    manifest = {"structure": "tensor", "tensors": [{"dtype": "float32", "shape": [1 << 38]}], "written": True}
    assert "exceeds" in _rejected(arena, manifest, tx.WRONG_SHAPE, max_bytes=1 << 20)


def test_a_claim_to_have_written_past_the_arena_is_refused_not_read(arena):
    """The arena holds what this side gave it; a manifest that says more was written is refused
    before a byte past the end is touched (which would fault the judge's process)."""
    size = arena.reserve(16)
    manifest = {"structure": "tensor", "tensors": [{"dtype": "uint8", "shape": [size + 1]}], "written": True}
    assert "arena of" in _rejected(arena, manifest, tx.WRONG_SHAPE)


def test_an_output_too_large_for_the_arena_is_judged_by_its_manifest(arena):
    """The arena is sized for the reference output; a float32 output where bf16 is expected does
    not fit, is not copied, and its manifest alone tells check_structure why it cannot match."""
    reference = torch.zeros(1 << 20, dtype=torch.bfloat16)
    manifest = _hand_over(arena, torch.zeros(1 << 20, dtype=torch.float32), room=reference)
    back, written = arena.load(manifest, "cpu", BIG)
    assert not written and back.device.type == "meta"
    verdict = check_structure(reference, back)
    assert (verdict.ok, verdict.category) == (False, tx.WRONG_DTYPE)


def test_the_arena_is_sealed_against_shrinking_for_every_holder():
    """A worker holding the descriptor cannot shrink the file under the judge's mapping (which
    would make the judge's next read die of SIGBUS); growing it changes nothing the judge reads."""
    arena = OutputArena(cuda=False)
    try:
        size = arena.reserve(1 << 20)
        code = (
            "import os, sys\nfd = int(sys.argv[1])\n"
            "try:\n    os.ftruncate(fd, 4096)\nexcept PermissionError:\n    print('refused')\n"
            "os.ftruncate(fd, os.fstat(fd).st_size * 2)\nprint('grown')\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, str(arena.fd)],
            pass_fds=(arena.fd,),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert out == ["refused", "grown"]
        with pytest.raises(OSError) as info:
            os.ftruncate(arena.fd, 0)  # the seal binds the judge too
        assert info.value.errno == errno.EPERM
        assert arena.size == size and os.fstat(arena.fd).st_size == 2 * size
    finally:
        arena.close()


def test_what_was_taken_cannot_be_changed_by_writing_the_arena_again(arena):
    value = torch.arange(64, dtype=torch.int32)
    back, _ = arena.load(_hand_over(arena, value), "cpu", BIG)
    ArenaWriter(arena.fd, cuda=False).write(torch.full((64,), -1, dtype=torch.int32), arena.size)
    assert torch.equal(back, value)


def test_the_arena_only_grows_and_each_tensor_is_aligned(arena):
    odd, wide = torch.randint(-5, 5, (7,), dtype=torch.int8), torch.randn(3, dtype=torch.float64)
    back, _ = arena.load(_hand_over(arena, (odd, wide)), "cpu", BIG)
    assert torch.equal(back[0], odd) and torch.equal(back[1], wide) and back[1].data_ptr() % ALIGN == 0
    first = arena.size
    assert first % OutputArena.GRANULE == 0 and arena.reserve(10) == first
    grown = arena.reserve(first + 1)
    assert grown >= first + first // 4 and grown % OutputArena.GRANULE == 0
    back, _ = arena.load(_hand_over(arena, torch.ones(1000)), "cpu", BIG)  # a new mapping: still the bytes written
    assert torch.equal(back, torch.ones(1000))


def test_the_span_does_not_depend_on_the_tensors_order():
    """A dict whose keys come in another order must fit the arena sized for the reference's."""
    rng = random.Random(0)
    for _ in range(200):
        sizes = [rng.choice([0, 1, 7, 63, 64, 65, 1000]) for _ in range(rng.randint(1, 6))]
        offsets, span = layout(sizes)
        assert all(o % ALIGN == 0 for o in offsets) and all(b - a >= n for a, b, n in zip(offsets, offsets[1:], sizes))
        assert layout(rng.sample(sizes, len(sizes)))[1] == span


def test_a_worker_without_an_arena_says_so():
    with pytest.raises(RuntimeError, match="without an output arena"):
        ArenaWriter(None, cuda=False).write(torch.zeros(4), 4096)


def test_closing_twice_is_harmless():
    arena = OutputArena(cuda=False)
    arena.reserve(100)
    arena.close()
    arena.close()
