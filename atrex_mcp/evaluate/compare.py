"""Output comparison: structure first (container, keys, dtype, shape), then numbers.

Semantics follow SPEC §0.4 of the operator set, tightened where that rule tests nothing:

* floating outputs: both sides in float64, |cand − ref| ≤ atol + rtol·|ref| with atol=1e-2,
  rtol=5e-2; the absolute term never exceeds rtol × RMS(reference), so outputs whose typical
  magnitude is ~0.01 are not accepted "almost regardless of content" (SPEC §3.3, §3.9, §3.17);
  NaN only where the reference has NaN, ±inf only where it has the same infinity;
* integer and bool outputs: exact (a router's top-k ids: exact except where the reference's
  own values tie, see RankedIds);
* fp8 outputs: compared code by code — a code one step from the reference's is tolerated on
  a small fraction of elements (one fp32 rounding difference can cross an fp8 midpoint,
  SPEC §0.3), anything further is a mismatch.

Numbers are judged in chunks of `CHUNK_ELEMENTS`, so memory stays bounded for outputs of many
GiB. The RMS cap needs the whole reference first (a pass over the reference alone, before the
allclose test); the fp8 rule keeps two tallies in one pass and lets the share of one-step codes
decide between them at the end. A chunk's figures stay on the device; each output's are read
back once.

On a GPU the allclose, exact and fp8 code rules run as one Triton pass over both outputs in
their own dtype (atrex_mcp.evaluate.compare_kernel, imported only there), with the same float64
arithmetic and so the same figures as the torch rule here, which judges everything else (CPU
outputs, ranked ids). The torch rule on the H200 cost 33-59 ms a call on large outputs, about
ten calls a shape, and 0.67 s a call on a quantiser's fp8 output of a few GiB.

Per-operator exceptions live in `OVERRIDES`, the one table of them. `compare_outputs` never
raises on a malformed candidate: the verdict says what is wrong.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.evaluate.compare_figures import FP8_DTYPES, ONE_PASS_DTYPES, RMS_BLOCK, Figures, Rule
from atrex_mcp.evaluate.models import MismatchDetail


@dataclass(frozen=True)
class RankedIds:
    """Ids of the k largest values of each row, in descending order (a router's top-k). Where the
    reference's own values tie to within rounding, its order among them is an accident of its
    arithmetic, and an honest kernel whose exp differs by an ulp picks the other id. So an id that
    differs from the reference's passes only if the value it names, recomputed here from the
    judge's inputs, equals the reference's value at that rank to within `tie_rtol`, and the row's
    ids are distinct: the id is judged by what it selects, nothing else is loosened."""

    values_output: str  # the output holding the values the ids rank (the reference's, in its order)
    select: Callable[[Mapping[str, Any], torch.Tensor], torch.Tensor]  # (inputs, ids) -> the values the ids name
    tie_rtol: float = 1e-6  # about eight fp32 ulps


@dataclass(frozen=True)
class Tolerance:
    """How one output tensor is judged."""

    rule: Rule
    atol: float = 1e-2
    rtol: float = 5e-2
    atol_at_most_rtol_rms: bool = True  # cap atol at rtol × RMS(reference)
    max_code_steps: int = 1  # fp8: farthest tolerated code distance
    max_off_code_fraction: float = 0.01  # fp8: share of elements allowed one step away
    ranked: RankedIds | None = None  # ranked_ids: what the ids select and how close a tie is


DEFAULT_FLOAT = Tolerance("allclose")
EXACT = Tolerance("exact")
DEFAULT_FP8 = Tolerance("fp8_codes")


def _router_probabilities(inputs: Mapping[str, Any], ids: torch.Tensor) -> torch.Tensor:
    """moe_topk_gating_softmax: the softmax probability each id names (NaN for an id out of
    range). Its shapes use no group-limited routing, which would zero some experts first."""
    p = torch.softmax(inputs["gating_output"].to(torch.float32), dim=-1)
    experts = p.shape[-1]
    inside = (ids >= 0) & (ids < experts)
    picked = p.gather(-1, ids.to(torch.int64).clamp(0, experts - 1))
    return picked.masked_fill_(~inside, math.nan)


# (op, output name) -> tolerance; output name "*" matches every output of the op.
# None is needed: fp8_blockscale_fused_moe's reference clamps to the e4m3fn maximum, so it never
# gives NaN near overflow, and an honest fp32 block-scaled implementation (per-128-K-tile scaled
# dots, slots summed one by one) differs from it by one code on 0 of 4992 elements at the smoke shape and on 0.004 % at
# hidden 7168
# (64 tokens, 16 experts, top-8, seeds 0 and 1; never two codes), well inside DEFAULT_FP8.
OVERRIDES: dict[tuple[str, str], Tolerance] = {
    # 200 timed input sets of 520 rows on the H200: two experts whose probabilities the
    # reference and an honest kernel round an ulp apart swapped places at ranks 7 and 8.
    ("moe_topk_gating_softmax", "topk_ids"): Tolerance(
        "ranked_ids", ranked=RankedIds(values_output="topk_weights", select=_router_probabilities)
    ),
}

# Elements judged at a time. The temporaries of one chunk (float64 copies of both sides, |c − r|,
# |r|, the relative error, masks: ~66 bytes per element measured, ~0.55 GiB) are bounded whatever
# the output's size; whole-output float64 copies would run the trusted process out of GPU memory
# (a 3 GiB bf16 attention output needs 12 GiB per float64 copy, and the rule makes several).
CHUNK_ELEMENTS = 1 << 23


def tolerance_for(op: str, output: str, dtype: torch.dtype) -> Tolerance:
    """The rule for one output: an operator override, else the dtype's default."""
    for key in ((op, output), (op, "*")):
        if key in OVERRIDES:
            return OVERRIDES[key]
    if dtype in FP8_DTYPES:
        return DEFAULT_FP8
    if dtype.is_floating_point or dtype.is_complex:
        return DEFAULT_FLOAT
    return EXACT


@dataclass(frozen=True)
class CompareResult:
    """The verdict: ok, or the stage/category of the first problem and what it was."""

    ok: bool
    stage: str | None = None
    category: str | None = None
    message: str = ""
    details: tuple[MismatchDetail, ...] = ()

    @property
    def worst(self) -> MismatchDetail | None:
        bad = [d for d in self.details if d.mismatches]
        return max(bad, key=lambda d: d.mismatch_fraction) if bad else None


def _structure_error(category: str, message: str) -> CompareResult:
    return CompareResult(ok=False, stage=tx.RUNTIME, category=category, message=message)


def flatten_outputs(value: Any) -> dict[str, Any] | CompareResult:
    """Name every leaf of a reference-style output (tensor, tuple/list, dict of tensors)."""
    if isinstance(value, torch.Tensor):
        return {"out": value}
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return {f"out[{i}]": v for i, v in enumerate(value)}
    return _structure_error(
        tx.WRONG_OUTPUT_TYPE, f"Output is a {type(value).__name__}, not a tensor, tuple or dict of tensors."
    )


def _kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, Mapping):
        return "dict"
    return "sequence"


def check_structure(reference: Any, candidate: Any) -> CompareResult:
    """Container kind, keys/length, plain-tensor type, dtype and shape — before any number is read."""
    ref_leaves, cand_leaves = flatten_outputs(reference), flatten_outputs(candidate)
    if isinstance(ref_leaves, CompareResult):
        raise TypeError(f"reference output is malformed: {ref_leaves.message}")
    if isinstance(cand_leaves, CompareResult):
        return cand_leaves
    if _kind(reference) != _kind(candidate):
        return _structure_error(
            tx.WRONG_OUTPUT_TYPE, f"Expected a {_kind(reference)} output, got a {_kind(candidate)}."
        )
    if list(ref_leaves) != list(cand_leaves) and sorted(ref_leaves) != sorted(cand_leaves):
        return _structure_error(tx.WRONG_KEYS, f"Expected outputs {sorted(ref_leaves)}, got {sorted(cand_leaves)}.")
    for name, ref in ref_leaves.items():
        cand = cand_leaves[name]
        if not isinstance(cand, torch.Tensor):
            return _structure_error(tx.WRONG_OUTPUT_TYPE, f"Output {name} is a {type(cand).__name__}, not a tensor.")
        if type(cand) is not torch.Tensor:
            return _structure_error(
                tx.WRONG_OUTPUT_TYPE,
                f"Output {name} is a tensor subclass ({type(cand).__name__}); return a plain torch.Tensor.",
            )
        if cand.dtype != ref.dtype:
            return _structure_error(tx.WRONG_DTYPE, f"Output {name} has dtype {cand.dtype}, expected {ref.dtype}.")
        if tuple(cand.shape) != tuple(ref.shape):
            return _structure_error(
                tx.WRONG_SHAPE, f"Output {name} has shape {tuple(cand.shape)}, expected {tuple(ref.shape)}."
            )
    return CompareResult(ok=True)


def _chunks(chunk: int, ref: torch.Tensor, *others: torch.Tensor) -> Iterator[tuple[int, tuple[torch.Tensor, ...]]]:
    """(offset, slices) over the flattened tensors in row-major order, every slice on ref's device
    (a candidate held in host memory is moved one chunk at a time)."""
    flats = [t.reshape(-1) for t in (ref, *others)]
    for offset in range(0, ref.numel(), chunk):
        yield offset, tuple(flat[offset : offset + chunk].to(ref.device) for flat in flats)


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    index = []
    for size in reversed(shape):
        flat, i = divmod(flat, size)
        index.append(i)
    return index[::-1]


class _Tally:
    """One output's figures: chunks judged by torch (`add`) stay on the device until `detail`
    reads them all back at once; the one-pass kernel hands over its own (`merge`)."""

    def __init__(self, ref: torch.Tensor, cand: torch.Tensor) -> None:
        self.ref, self.cand = ref, cand
        self.figures = Figures()
        self._pending: list[torch.Tensor] = []

    def add(
        self,
        offset: int,
        ref64: torch.Tensor,
        cand64: torch.Tensor,
        bad: torch.Tensor,
        nonfinite_bad: int | torch.Tensor,
        *,
        both: torch.Tensor | None = None,
        diff: torch.Tensor | None = None,
        refabs: torch.Tensor | None = None,
    ) -> None:
        """One chunk's figures (a non-empty chunk at flat `offset`), left on the device. `both`
        (both sides finite), `diff` (|c − r|, which is overwritten) and `refabs` (|r|) may come
        from the caller's own rule, computed on the same values."""
        if both is None:
            both = torch.isfinite(ref64) & torch.isfinite(cand64)
        if diff is None:
            diff = (cand64 - ref64).abs_()
        diff.masked_fill_(~both, 0.0)
        if refabs is None:
            refabs = ref64.abs()
        rel = torch.div(diff, refabs).masked_fill_(~(both & (refabs > 0)), 0.0)
        count = bad.sum()
        nonfinite = nonfinite_bad if isinstance(nonfinite_bad, torch.Tensor) else count.new_tensor(nonfinite_bad)
        first = torch.where(count > 0, bad.to(torch.uint8).argmax() + offset, -1)  # argmax: the first of equal maxima
        figures = [diff.max(), rel.max(), count, nonfinite, first]
        self._pending.append(torch.stack([f.to(torch.float64) for f in figures]))  # counts < 2^53: exact

    def merge(self, figures: Figures) -> None:
        self.figures = self.figures.merged(figures)

    def _value(self, t: torch.Tensor) -> float | None:
        assert self.figures.first is not None
        return _json_float(t[tuple(_unravel(self.figures.first, tuple(t.shape)))].to(torch.float64).item())

    def detail(self, name: str, tol: Tolerance, atol: float | None, rtol: float | None) -> MismatchDetail:
        if self._pending:  # one synchronisation for all of torch's chunks
            for max_abs, max_rel, count, nonfinite, first in torch.stack(self._pending).tolist():
                self.merge(Figures(max_abs, max_rel, int(count), int(nonfinite), None if first < 0 else int(first)))
            self._pending.clear()
        f, shape = self.figures, tuple(self.ref.shape)
        numel = math.prod(shape)
        return MismatchDetail(
            output=name,
            rule=tol.rule,
            atol=atol,
            rtol=rtol,
            max_abs_error=f.max_abs,
            max_rel_error=f.max_rel,
            mismatch_fraction=f.mismatches / numel if numel else 0.0,
            mismatches=f.mismatches,
            numel=numel,
            first_bad_index=None if f.first is None else _unravel(f.first, shape),
            reference_value=None if f.first is None else self._value(self.ref),
            candidate_value=None if f.first is None else self._value(self.cand),
            nonfinite_mismatches=f.nonfinite_mismatches,
        )


def _json_float(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None


def _nonfinite_agree(ref: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
    """True where both are NaN, or both the same infinity."""
    return (torch.isnan(ref) & torch.isnan(cand)) | (torch.isinf(ref) & (ref == cand))


def _block_sums(x: torch.Tensor) -> torch.Tensor:
    """Sums of consecutive RMS_BLOCK-element blocks of x (the last one zero-padded), each by the
    same pairwise tree of elementwise adds, so on any device and for any number of blocks; left
    on the device, read back once for the whole output."""
    x = torch.nn.functional.pad(x, (0, -x.numel() % RMS_BLOCK)).view(-1, RMS_BLOCK)
    while x.shape[1] > 1:
        half = x.shape[1] // 2
        x = x[:, :half] + x[:, half:]
    return x.view(-1)


def _rms(block_sums: Iterable[float], finite: int) -> float | None:
    """sqrt(Σ squares / count), the block sums added exactly (fsum); None without finite values."""
    return math.sqrt(math.fsum(block_sums) / finite) if finite else None


def _finite_rms(ref: torch.Tensor, chunk: int) -> float | None:
    """RMS of the reference's finite values (None when it has none): the first pass of the
    allclose rule. Squares are summed in fixed blocks and the block sums added exactly (fsum),
    so the result does not depend on the chunk size."""
    sums, counts = [], []
    for _, (r,) in _chunks(max(chunk // RMS_BLOCK, 1) * RMS_BLOCK, ref):
        r64 = r.to(torch.float64)
        keep = torch.isfinite(r64)
        sums.append(_block_sums(torch.where(keep, r64, 0.0).square_()))  # r64 may be ref itself: nothing in place
        counts.append(keep.sum())
    if not sums:
        return None
    return _rms(torch.cat(sums).tolist(), int(torch.stack(counts).sum().item()))


def _one_pass(rule: Rule, ref: torch.Tensor, one_pass: bool | None) -> bool:
    """Whether compare_kernel judges this output: for a rule and dtype it takes, on a CUDA
    reference (None), also on CPU tensors under Triton's interpreter (True), or never (False).
    The candidate's chunks are moved to the reference's device before they are judged."""
    if one_pass is False or ref.dtype not in ONE_PASS_DTYPES.get(rule, ()):
        return False
    return one_pass is True or (ref.device.type == "cuda" and importlib.util.find_spec("triton") is not None)


def _one_pass_chunks(
    chunk: int, ref: torch.Tensor, cand: torch.Tensor
) -> Iterator[tuple[int, tuple[torch.Tensor, ...]]]:
    """The launches of the one pass: the whole output at once when the candidate is on the
    reference's device (the kernel makes no temporaries to bound, and a launch costs more host
    time than a chunk takes the GPU), else `chunk` elements at a time as they are moved there."""
    return _chunks(max(ref.numel(), 1) if cand.device == ref.device else chunk, ref, cand)


def _compare_allclose(
    name: str, tol: Tolerance, ref: torch.Tensor, cand: torch.Tensor, chunk: int, one_pass: bool | None
) -> MismatchDetail:
    by_kernel = _one_pass("allclose", ref, one_pass)
    if by_kernel:
        from atrex_mcp.evaluate import compare_kernel  # Triton: imported where the kernel runs
    atol = tol.atol
    if tol.atol_at_most_rtol_rms:
        rms = _rms(*compare_kernel.square_sums(ref)) if by_kernel else _finite_rms(ref, chunk)
        if rms is not None:
            atol = min(atol, tol.rtol * rms)
    tally = _Tally(ref, cand)
    if by_kernel:
        pieces = _one_pass_chunks(chunk, ref, cand)
        tally.merge(compare_kernel.judge_chunks(pieces, exact=False, atol=atol, rtol=tol.rtol))
        return tally.detail(name, tol, atol, tol.rtol)
    for offset, (r, c) in _chunks(chunk, ref, cand):
        # finiteness and agreement of non-finite values on the outputs' own dtypes (a float64
        # copy keeps both), the tolerance in float64
        finite = torch.isfinite(r) & torch.isfinite(c)
        agree = _nonfinite_agree(r, c)
        r64, c64 = r.to(torch.float64), c.to(torch.float64)
        diff, refabs = (c64 - r64).abs_(), r64.abs()
        within = diff <= refabs.mul(tol.rtol).add_(atol)  # atol + rtol·|r|
        bad = ~((finite & within) | agree)
        tally.add(offset, r64, c64, bad, (~finite & bad).sum(), both=finite, diff=diff, refabs=refabs)
    return tally.detail(name, tol, atol, tol.rtol)


def _compare_exact(
    name: str, tol: Tolerance, ref: torch.Tensor, cand: torch.Tensor, chunk: int, one_pass: bool | None
) -> MismatchDetail:
    tally = _Tally(ref, cand)
    if _one_pass("exact", ref, one_pass):
        from atrex_mcp.evaluate import compare_kernel  # Triton: imported where the kernel runs

        tally.merge(compare_kernel.judge_chunks(_one_pass_chunks(chunk, ref, cand), exact=True))
    else:
        for offset, (r, c) in _chunks(chunk, ref, cand):
            tally.add(offset, r.to(torch.float64), c.to(torch.float64), r != c, 0)
    return tally.detail(name, tol, None, None)


def _code_index(t: torch.Tensor) -> torch.Tensor:
    """fp8 codes as signed positions on the number line (adjacent codes differ by 1)."""
    codes = t.view(torch.uint8).to(torch.int32)
    magnitude = codes & 0x7F
    return torch.where(codes >= 0x80, -magnitude, magnitude)


def _fp8_masks(
    tol: Tolerance, ref: torch.Tensor, cand: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(off: a different code, far: more than max_code_steps away, nan_disagree) for fp8 slices."""
    steps = (_code_index(ref) - _code_index(cand)).abs()
    ref_nan, cand_nan = torch.isnan(ref.float()), torch.isnan(cand.float())
    nan_disagree = ref_nan ^ cand_nan
    off = (steps > 0) & ~(ref_nan & cand_nan) & ~nan_disagree
    return off, off & (steps > tol.max_code_steps), nan_disagree


def _compare_fp8(
    name: str, tol: Tolerance, ref: torch.Tensor, cand: torch.Tensor, chunk: int, one_pass: bool | None
) -> MismatchDetail:
    # Whether one-step codes count as mismatches depends on how many there are in the whole
    # output, so one pass keeps both tallies (every off code bad / only far codes bad) and the
    # count decides between them at the end: each chunk is moved and judged once.
    every, far_only = _Tally(ref, cand), _Tally(ref, cand)
    if _one_pass("fp8_codes", ref, one_pass):
        from atrex_mcp.evaluate import compare_kernel  # Triton: imported where the kernel runs

        figures = compare_kernel.judge_codes(_one_pass_chunks(chunk, ref, cand), max_steps=tol.max_code_steps)
        every.merge(figures.every_off)
        far_only.merge(figures.far_only)
        near_count = figures.near
    else:
        near = []
        for offset, (r, c) in _chunks(chunk, ref, cand):
            off, far, nan_disagree = _fp8_masks(tol, r, c)
            near.append((off & ~far).sum())
            r64, c64, nonfinite_bad = r.to(torch.float64), c.to(torch.float64), nan_disagree.sum()
            every.add(offset, r64, c64, off | nan_disagree, nonfinite_bad)
            far_only.add(offset, r64, c64, far | nan_disagree, nonfinite_bad)
        near_count = int(torch.stack(near).sum().item()) if near else 0
    every_off = bool(ref.numel()) and near_count / ref.numel() > tol.max_off_code_fraction
    return (every if every_off else far_only).detail(name, tol, None, None)


def _compare_ranked_ids(
    name: str,
    tol: Tolerance,
    ref: torch.Tensor,
    cand: torch.Tensor,
    ref_values: torch.Tensor,
    inputs: Callable[[], Mapping[str, Any]] | None,
) -> MismatchDetail:
    """Exact, except where the reference's values tie (RankedIds). Without `inputs` (nothing to
    recompute the values from) every differing id is a mismatch."""
    assert tol.ranked is not None, "a ranked_ids tolerance names what its ids select"
    cand = cand.to(ref.device)
    off = ref != cand
    if bool(off.any()) and inputs is not None:
        chosen = tol.ranked.select(inputs(), cand).to(torch.float64)
        expected = ref_values.to(device=chosen.device, dtype=torch.float64)
        tied = (chosen - expected).abs() <= tol.ranked.tie_rtol * expected.abs()  # False where NaN
        ordered = cand.sort(dim=-1).values
        repeated = (ordered[..., 1:] == ordered[..., :-1]).any(dim=-1, keepdim=True)
        off = off & ~(tied.to(off.device) & ~repeated)
    tally = _Tally(ref, cand)
    if ref.numel():
        tally.add(0, ref.reshape(-1).to(torch.float64), cand.reshape(-1).to(torch.float64), off.reshape(-1), 0)
    return tally.detail(name, tol, None, tol.ranked.tie_rtol)


_RULES = {"allclose": _compare_allclose, "exact": _compare_exact, "fp8_codes": _compare_fp8}


def compare_outputs(
    reference: Any,
    candidate: Any,
    op: str,
    *,
    chunk: int = CHUNK_ELEMENTS,
    inputs: Callable[[], Mapping[str, Any]] | None = None,
    one_pass: bool | None = None,
) -> CompareResult:
    """Judge a candidate's output against the reference output of the same inputs.

    The candidate must already be plain tensors (see atrex_mcp.evaluate.transfer for loading
    untrusted outputs), on the reference's device or in host memory: it is moved `chunk`
    elements at a time, and the numbers are judged `chunk` elements at a time, so the memory
    this takes beyond both outputs is bounded whatever their size. Structure problems are
    runtime failures; numbers outside the tolerance are a correctness failure with per-output
    detail. `inputs` gives the judge's inputs of this output again, for a rule that judges an
    output by what it selects from them (ranked_ids); it is called only where that is needed.
    On a GPU the allclose, exact and fp8 code rules run as one pass
    (atrex_mcp.evaluate.compare_kernel), with the figures of the torch rule; it makes no
    temporaries, so only a candidate in host memory is taken in chunks. `one_pass` chooses the
    path: None (the judge) takes the one-pass kernel wherever it applies on a GPU, True also on
    CPU tensors (Triton's interpreter: the tests), False never (the torch rule everywhere: the
    measurements' baseline).
    """
    structure = check_structure(reference, candidate)
    if not structure.ok:
        return structure
    ref_leaves, cand_leaves = flatten_outputs(reference), flatten_outputs(candidate)
    assert isinstance(ref_leaves, dict) and isinstance(cand_leaves, dict)
    details = []
    for name in sorted(ref_leaves):
        ref = ref_leaves[name]
        tol = tolerance_for(op, name, ref.dtype)
        if tol.ranked is not None:
            values = ref_leaves[tol.ranked.values_output]
            details.append(_compare_ranked_ids(name, tol, ref, cand_leaves[name], values, inputs))
        else:
            details.append(_RULES[tol.rule](name, tol, ref, cand_leaves[name], chunk, one_pass))
    bad = [d for d in details if d.mismatches]
    if not bad:
        return CompareResult(ok=True, details=tuple(details))
    worst = max(bad, key=lambda d: d.mismatch_fraction)
    message = (
        f"Output {worst.output}: {worst.mismatches}/{worst.numel} elements outside tolerance ({worst.rule}); "
        f"max abs error {worst.max_abs_error:.4g}, max rel error {worst.max_rel_error:.4g}, "
        f"first at {worst.first_bad_index} (reference {worst.reference_value}, got {worst.candidate_value})."
    )
    return CompareResult(
        ok=False, stage=tx.CORRECTNESS, category=tx.NUMERIC_MISMATCH, message=message, details=tuple(details)
    )
