"""compare_outputs: structure before numbers, SPEC §0.4 tolerances and their tightenings."""

import pytest
import torch

from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.evaluate.compare import compare_outputs, tolerance_for


def test_identical_outputs_pass_with_details():
    ref = torch.randn(4, 8, dtype=torch.bfloat16)
    result = compare_outputs(ref, ref.clone(), "rms_norm")
    assert result.ok and result.details[0].mismatches == 0


@pytest.mark.parametrize(
    ("candidate", "category"),
    [
        (torch.zeros(4, 8, dtype=torch.float32), tx.WRONG_DTYPE),
        (torch.zeros(8, 4, dtype=torch.bfloat16), tx.WRONG_SHAPE),
        ((torch.zeros(4, 8, dtype=torch.bfloat16),), tx.WRONG_OUTPUT_TYPE),
        ([1.0, 2.0], tx.WRONG_OUTPUT_TYPE),
        (torch.nn.Parameter(torch.zeros(4, 8, dtype=torch.bfloat16)), tx.WRONG_OUTPUT_TYPE),
    ],
)
def test_structure_is_checked_before_numbers(candidate, category):
    result = compare_outputs(torch.zeros(4, 8, dtype=torch.bfloat16), candidate, "rms_norm")
    assert not result.ok and result.stage == tx.RUNTIME and result.category == category


def test_dict_keys_must_match_exactly():
    ref = {"a": torch.zeros(2), "b": torch.zeros(2)}
    assert compare_outputs(ref, {"b": torch.zeros(2), "a": torch.zeros(2)}, "x").ok
    result = compare_outputs(ref, {"a": torch.zeros(2), "c": torch.zeros(2)}, "x")
    assert result.category == tx.WRONG_KEYS


def test_tuple_length_must_match():
    result = compare_outputs((torch.zeros(2), torch.zeros(2)), (torch.zeros(2),), "x")
    assert result.category == tx.WRONG_KEYS


def test_numeric_mismatch_reports_errors_and_first_bad_index():
    ref = torch.ones(3, 5)
    cand = ref.clone()
    cand[1, 2] = 2.0
    cand[2, 4] = 1.5
    result = compare_outputs(ref, cand, "x")
    assert not result.ok and result.stage == tx.CORRECTNESS and result.category == tx.NUMERIC_MISMATCH
    worst = result.worst
    assert worst.first_bad_index == [1, 2] and worst.mismatches == 2
    assert worst.max_abs_error == pytest.approx(1.0) and worst.max_rel_error == pytest.approx(1.0)
    assert worst.mismatch_fraction == pytest.approx(2 / 15)
    assert worst.reference_value == 1.0 and worst.candidate_value == 2.0


def test_default_tolerance_on_unit_magnitude_outputs():
    ref = torch.ones(100)
    assert compare_outputs(ref, ref * 1.05, "x").ok  # within atol + rtol·|ref| = 0.06
    assert not compare_outputs(ref, ref * 1.07, "x").ok


def test_small_magnitude_outputs_get_a_tighter_absolute_tolerance():
    # SPEC §0.4: outputs of magnitude ~0.01 would pass atol=1e-2 whatever they hold.
    ref = torch.full((1000,), 0.01)
    assert not compare_outputs(ref, torch.zeros(1000), "x").ok
    assert compare_outputs(ref, ref * 1.02, "x").ok
    detail = compare_outputs(ref, torch.zeros(1000), "x").worst
    assert detail.atol == pytest.approx(5e-4)


def test_nan_and_inf_only_where_the_reference_has_them():
    ref = torch.tensor([1.0, float("nan"), float("inf"), -float("inf")])
    assert compare_outputs(ref, ref.clone(), "x").ok
    assert not compare_outputs(ref, torch.tensor([float("nan"), float("nan"), float("inf"), -float("inf")]), "x").ok
    assert not compare_outputs(ref, torch.tensor([1.0, 0.0, float("inf"), -float("inf")]), "x").ok
    bad = compare_outputs(ref, torch.tensor([1.0, float("nan"), -float("inf"), -float("inf")]), "x")
    assert bad.worst.nonfinite_mismatches == 1


def test_integers_are_exact():
    ref = torch.arange(10, dtype=torch.int32)
    cand = ref.clone()
    cand[3] += 1
    assert tolerance_for("x", "out", torch.int32).rule == "exact"
    result = compare_outputs(ref, cand, "x")
    assert not result.ok and result.worst.first_bad_index == [3]


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="torch without fp8 dtypes")
def test_fp8_codes_tolerate_rare_one_step_differences_only():
    ref = torch.linspace(-400, 400, 1000).to(torch.float8_e4m3fn)
    codes = ref.view(torch.uint8).clone()
    one_step = codes.clone()
    one_step[500] = one_step[500] + 1  # adjacent code, 1 element in 1000
    assert compare_outputs(ref, one_step.view(torch.float8_e4m3fn), "x").ok
    two_steps = codes.clone()
    two_steps[500] = two_steps[500] + 2
    assert not compare_outputs(ref, two_steps.view(torch.float8_e4m3fn), "x").ok
    many = codes.clone()
    many[100:200] = many[100:200] + 1  # 10 % one step away
    assert not compare_outputs(ref, many.view(torch.float8_e4m3fn), "x").ok


def test_fp8_moe_output_is_judged_by_the_default_fp8_rule_and_nan_never_passes():
    """Its reference saturates at the e4m3fn maximum, so a NaN output is wrong, even near overflow."""
    assert tolerance_for("fp8_blockscale_fused_moe", "out", torch.float8_e4m3fn).max_off_code_fraction == 0.01
    ref = torch.full((64,), 448.0).to(torch.float8_e4m3fn)
    cand = ref.clone()
    cand[0] = float("nan")
    assert not compare_outputs(ref, cand, "fp8_blockscale_fused_moe").ok


def _planted_float(dtype: torch.dtype, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """9000 elements (several RMS blocks) within tolerance but for four planted mismatches, two
    of them non-finite, beside NaN/inf/zero entries where both sides agree."""
    gen = torch.Generator().manual_seed(7)
    ref = torch.randn(9, 1000, generator=gen, dtype=torch.float64) * scale
    cand = ref * (1 + 0.06 * (torch.rand(ref.shape, generator=gen, dtype=torch.float64) - 0.5))
    ref, cand = ref.to(dtype), cand.to(dtype)
    r, c = ref.view(-1), cand.view(-1)
    c[1234], c[5000] = r[1234] * 3 + 1, -r[5000] * 2
    r[17] = c[17] = float("nan")
    c[4500] = float("nan")
    r[8000] = c[8000] = float("inf")
    r[8001], c[8001] = float("inf"), -float("inf")
    r[300] = c[300] = 0.0
    return ref, cand


def _planted_fp8(one_step: slice) -> tuple[torch.Tensor, torch.Tensor]:
    ref = torch.linspace(-400, 400, 1000).to(torch.float8_e4m3fn)
    codes = ref.view(torch.uint8).clone()
    codes[one_step] += 1
    codes[600] += 2  # two codes away
    codes[700] = 0x7F  # NaN
    return ref, codes.view(torch.float8_e4m3fn)


def _planted_ints() -> tuple[torch.Tensor, torch.Tensor]:
    ref = torch.randint(-1000, 1000, (40, 25), generator=torch.Generator().manual_seed(3), dtype=torch.int32)
    cand = ref.clone()
    cand[3, 7] += 1
    cand[30, 1] = -cand[30, 1] - 1
    return ref, cand


# (reference, candidate, mismatches, first bad index, non-finite mismatches) for every rule
PLANTED = {
    "allclose bf16": (*_planted_float(torch.bfloat16, 1.0), 4, [1, 234], 2),
    "allclose fp32, RMS-capped atol": (*_planted_float(torch.float32, 0.01), 4, [1, 234], 2),
    "allclose fp64": (*_planted_float(torch.float64, 1.0), 4, [1, 234], 2),
    "exact int32": (*_planted_ints(), 2, [3, 7], 0),
    "fp8 rare one-step codes": (*_planted_fp8(slice(250, 251)), 2, [600], 1),
    "fp8 many one-step codes": (*_planted_fp8(slice(100, 130)), 32, [100], 1),
}


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_chunked_comparison_equals_the_one_chunk_comparison(case):
    ref, cand, mismatches, first, nonfinite = PLANTED[case]
    ref_before = ref.clone()
    whole = compare_outputs(ref, cand, "x", chunk=ref.numel())
    worst = whole.worst
    assert (worst.mismatches, worst.first_bad_index, worst.nonfinite_mismatches) == (mismatches, first, nonfinite)
    for chunk in (7, 1000, 4099):
        assert compare_outputs(ref, cand, "x", chunk=chunk) == whole, f"chunk {chunk}"
    assert torch.equal(ref.view(torch.uint8), ref_before.view(torch.uint8))  # judged without touching the reference


def test_single_element_chunks_over_several_outputs_and_rules():
    ints, ints_cand = _planted_ints()
    ref = {
        "scores": torch.tensor([[1.0, float("nan")], [0.0, 2.0]]),
        "ids": ints[3:5],
        "flags": torch.tensor([True, False, True]),
    }
    cand = {
        "scores": torch.tensor([[1.01, float("nan")], [0.5, 2.0]]),
        "ids": ints_cand[3:5],
        "flags": torch.tensor([True, True, True]),
    }
    whole = compare_outputs(ref, cand, "x")
    assert [d.mismatches for d in whole.details] == [1, 1, 1]
    assert compare_outputs(ref, cand, "x", chunk=1) == whole


def test_rms_cap_does_not_depend_on_the_chunk_size():
    ref = torch.randn(20000, generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 0.01
    atols = {compare_outputs(ref, ref.clone(), "x", chunk=chunk).details[0].atol for chunk in (4096, 5000, 8192, 20000)}
    assert len(atols) == 1 and atols.pop() == pytest.approx(0.05 * ref.square().mean().sqrt().item(), rel=1e-12)


# -- a router's top-k ids: exact, except where the reference's own probabilities tie ------------


def _router_case():
    """Logits of one row whose experts 3 and 5 are an ulp apart after the softmax, and the
    reference's top-3 with them at ranks 2 and 3 (expert 3 first)."""
    logits = torch.tensor([[4.0, -1.0, 3.0, 1.0, -2.0, 1.0, 0.5, -3.0]])
    logits[0, 5] = torch.nextafter(logits[0, 3], torch.tensor(0.0))  # a hair below expert 3
    p = torch.softmax(logits, dim=-1)
    ids = torch.tensor([[0, 2, 3]], dtype=torch.int32)
    return {"gating_output": logits}, {"topk_weights": p.gather(-1, ids.long()), "topk_ids": ids}, p


def _judged(candidate_ids, inputs=None):
    given, reference, p = _router_case()
    candidate = {"topk_weights": p.gather(-1, candidate_ids.long().clamp(0, 7)), "topk_ids": candidate_ids}
    again = (lambda: given) if inputs is None else inputs
    return compare_outputs(reference, candidate, "moe_topk_gating_softmax", inputs=again)


def test_router_ids_may_name_the_other_expert_of_a_tie_at_the_last_rank():
    verdict = _judged(torch.tensor([[0, 2, 5]], dtype=torch.int32))
    assert verdict.ok, verdict.message
    assert {d.output: d.rule for d in verdict.details}["topk_ids"] == "ranked_ids"


def test_router_ids_naming_an_expert_that_does_not_tie_fail():
    verdict = _judged(torch.tensor([[0, 2, 6]], dtype=torch.int32))
    assert not verdict.ok and verdict.category == tx.NUMERIC_MISMATCH
    assert "topk_ids" in verdict.message or "topk_weights" in verdict.message


def test_router_ids_swapped_without_a_tie_fail_even_with_the_weights_right():
    given, reference, _ = _router_case()
    candidate = {
        "topk_weights": reference["topk_weights"].clone(),
        "topk_ids": torch.tensor([[2, 0, 3]], dtype=torch.int32),
    }
    verdict = compare_outputs(reference, candidate, "moe_topk_gating_softmax", inputs=lambda: given)
    assert not verdict.ok
    bad = {d.output: d.mismatches for d in verdict.details}
    assert bad == {"topk_ids": 2, "topk_weights": 0}


@pytest.mark.parametrize("ids", [[[0, 2, 2]], [[0, 2, 8]], [[0, 2, -1]]], ids=["repeated", "past_end", "negative"])
def test_router_ids_repeated_or_out_of_range_fail(ids):
    assert not _judged(torch.tensor(ids, dtype=torch.int32)).ok


def test_router_ids_without_the_inputs_are_exact_and_the_inputs_are_made_only_on_a_difference():
    made = []
    given, _, _ = _router_case()

    def inputs():
        made.append(1)
        return given

    assert _judged(torch.tensor([[0, 2, 3]], dtype=torch.int32), inputs=inputs).ok and not made
    assert _judged(torch.tensor([[0, 2, 5]], dtype=torch.int32), inputs=inputs).ok and made == [1]
    _, reference, p = _router_case()
    tied = {
        "topk_weights": p.gather(-1, torch.tensor([[0, 2, 5]])),
        "topk_ids": torch.tensor([[0, 2, 5]], dtype=torch.int32),
    }
    assert not compare_outputs(reference, tied, "moe_topk_gating_softmax").ok


def test_other_integer_outputs_stay_exact():
    assert tolerance_for("moe_align_block_size", "sorted_token_ids", torch.int32).rule == "exact"
    assert tolerance_for("moe_topk_gating_softmax", "topk_ids", torch.int32).rule == "ranked_ids"
