"""The output hand-over between worker and judge (sandbox.tensor_files → evaluate.transfer):
what the worker writes comes back bit for bit, and every way a hostile worker could bend the
files or the manifest is refused with a runtime-stage category, never followed or trusted."""

from __future__ import annotations

import os
import time

import pytest
import torch

from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.evaluate.transfer import OutputReader, OutputRejected
from sandbox.tensor_files import IO_DIR, TensorWriter, file_name

STEM = "0123456789ab"
BIG = 1 << 30


@pytest.fixture
def scratch(tmp_path):
    (tmp_path / IO_DIR).mkdir()
    return tmp_path


def _write(scratch, value, stem=STEM):
    return TensorWriter(scratch / IO_DIR).write(value, stem)


def _same(a, b):
    """Equal dtype, shape and bytes (fp8 has no torch.equal)."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


@pytest.mark.parametrize("value", [
    torch.randn(3, 5, dtype=torch.bfloat16),
    torch.randn(7, 9).t(),  # not contiguous: written in C order of its logical shape
    torch.tensor(2.5),  # 0-dim
    torch.empty(0, 4, dtype=torch.float16),
    torch.tensor([True, False, True]),
    torch.randn(4, 8).to(torch.float8_e4m3fn),
])
def test_a_tensor_comes_back_bit_for_bit(scratch, value):
    back = OutputReader(scratch).load(STEM, _write(scratch, value), "cpu", BIG)
    assert type(back) is torch.Tensor and back.is_contiguous() and _same(back, value.contiguous())
    assert not list((scratch / IO_DIR).iterdir())  # read files are removed


def test_tuples_and_dicts_keep_their_structure(scratch):
    q, s = torch.randint(-128, 127, (4, 16), dtype=torch.int8), torch.rand(4, 1)
    back = OutputReader(scratch).load(STEM, _write(scratch, [q, s]), "cpu", BIG)
    assert isinstance(back, tuple) and torch.equal(back[0], q) and torch.equal(back[1], s)
    back = OutputReader(scratch).load(STEM, _write(scratch, {"ids": q, "w": s}), "cpu", BIG)
    assert list(back) == ["ids", "w"] and torch.equal(back["w"], s)


def _rejected(scratch, manifest, category=tx.WRONG_OUTPUT_TYPE, max_bytes=BIG):
    with pytest.raises(OutputRejected) as info:
        OutputReader(scratch).load(STEM, manifest, "cpu", max_bytes)
    assert (info.value.stage, info.value.category) == (tx.RUNTIME, category), info.value.message
    return info.value.message


@pytest.mark.parametrize("manifest", [
    None, [], "tensor", {"structure": "pickle", "tensors": []},
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
])
def test_a_malformed_manifest_is_refused(scratch, manifest):
    _write(scratch, torch.zeros(1))
    _rejected(scratch, manifest)


def test_a_file_that_does_not_match_the_manifest_is_refused(scratch):
    manifest = _write(scratch, torch.zeros(4))
    manifest["tensors"][0]["shape"] = [8]
    assert "16 bytes" in _rejected(scratch, manifest, tx.WRONG_SHAPE)
    manifest["tensors"][0]["shape"] = [4]
    assert "missing" in _rejected(scratch, manifest)  # a refused file is removed too: nothing is read twice


def test_an_output_far_larger_than_the_reference_is_refused_before_reading(scratch):
    manifest = {"structure": "tensor", "tensors": [{"dtype": "float32", "shape": [1 << 38]}]}
    assert "exceeds" in _rejected(scratch, manifest, tx.WRONG_SHAPE, max_bytes=1 << 20)


def _plant(scratch, how, target):
    path = scratch / IO_DIR / file_name(STEM, 0)
    if how == "symlink":
        path.symlink_to(target)
    elif how == "hardlink":
        os.link(target, path)
    elif how == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


@pytest.mark.parametrize("how", ["symlink", "hardlink", "fifo", "directory"])
def test_links_pipes_and_directories_are_never_read(scratch, tmp_path_factory, how):
    secret = tmp_path_factory.mktemp("hidden") / "roofline.json"
    secret.write_bytes(b"SECRET-SOL" * 4)  # 40 bytes: would pass as float32[10]
    _plant(scratch, how, secret)
    start = time.monotonic()
    _rejected(scratch, {"structure": "tensor", "tensors": [{"dtype": "float32", "shape": [10]}]})
    assert time.monotonic() - start < 5  # a FIFO is not waited on


def test_the_io_directory_swapped_for_a_link_is_refused(scratch, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    _write(scratch, torch.zeros(4))
    os.rename(scratch / IO_DIR, elsewhere / "io")
    (scratch / IO_DIR).symlink_to(elsewhere / "io")
    assert "no longer a directory" in _rejected(scratch, {"structure": "tensor", "tensors": [{"dtype": "float32", "shape": [4]}]})


def test_a_file_truncated_while_it_is_read_is_refused_not_a_crash(scratch, monkeypatch):
    """The bytes are read, never mapped: a worker that shrinks its file mid-read gets a refusal
    (a mapping would have died of SIGBUS in the judge's process)."""
    manifest = _write(scratch, torch.zeros(1 << 20))
    real_fstat = os.fstat

    def fstat_then_truncate(fd):
        info = real_fstat(fd)
        os.truncate(scratch / IO_DIR / file_name(STEM, 0), 1000)
        return info

    monkeypatch.setattr(os, "fstat", fstat_then_truncate)
    assert "shrank" in _rejected(scratch, manifest, tx.WRONG_SHAPE)


def test_the_stem_is_the_judges_choice(scratch):
    with pytest.raises(ValueError):
        OutputReader(scratch).load("../x", {"structure": "tensor", "tensors": []}, "cpu", BIG)


def test_one_buffer_serves_every_load_and_each_tensor_is_aligned(scratch):
    """Mixed dtypes of odd sizes land at aligned offsets of one reused buffer; a smaller output
    later reuses it, a larger one grows it."""
    reader = OutputReader(scratch)
    odd, wide = torch.randint(-5, 5, (7,), dtype=torch.int8), torch.randn(3, dtype=torch.float64)
    back = reader.load(STEM, _write(scratch, (odd, wide)), "cpu", BIG)
    assert torch.equal(back[0], odd) and torch.equal(back[1], wide)
    assert back[1].data_ptr() % 64 == 0 and reader.buffer.numel() == 64 + 24
    first = reader.buffer.data_ptr()
    reader.load(STEM, _write(scratch, torch.zeros(4)), "cpu", BIG)
    assert reader.buffer.data_ptr() == first
    reader.load(STEM, _write(scratch, torch.zeros(1000)), "cpu", BIG)
    assert reader.buffer.numel() == 4000
