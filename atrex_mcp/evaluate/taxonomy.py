"""The failure taxonomy: stable (stage, category) names that every evaluation result uses,
so results from many runs aggregate into one failure table.

A shape fails at the first stage that rejects it: compile → runtime → correctness →
performance. Integrity incidents are reported next to a result; some of them also fail the
shape (see `INTEGRITY_FAILS`). A shape the evaluation stopped before judging (its deadline
passed, or the caller cancelled) is `not_run`: no verdict on the candidate at all. Never
rename a constant: published tables key on these strings.
"""

from __future__ import annotations

from typing import Final

# Stages, in gate order.
COMPILE: Final = "compile"
RUNTIME: Final = "runtime"
CORRECTNESS: Final = "correctness"
PERFORMANCE: Final = "performance"
STAGES: Final = (COMPILE, RUNTIME, CORRECTNESS, PERFORMANCE)

# compile: the candidate file could not become a callable Model.
SYNTAX_ERROR: Final = "syntax_error"
IMPORT_ERROR: Final = "import_error"
NO_MODEL: Final = "no_model"
NOT_NN_MODULE: Final = "not_nn_module"
SIGNATURE_MISMATCH: Final = "signature_mismatch"
COMPILE_TIMEOUT: Final = "compile_timeout"
COMPILE_OOM: Final = "compile_oom"
KERNEL_COMPILE_ERROR: Final = "kernel_compile_error"  # the DSL compiler rejected a kernel at first launch

# runtime: the Model ran but did not produce a well-formed answer.
EXCEPTION: Final = "exception"
TIMEOUT: Final = "timeout"
CUDA_FAULT: Final = "cuda_fault"
CRASH: Final = "crash"  # the worker process died (segfault, abort, killed for memory)
OOM: Final = "oom"
WRONG_OUTPUT_TYPE: Final = "wrong_output_type"  # container kind, a non-tensor, a tensor subclass
WRONG_SHAPE: Final = "wrong_shape"
WRONG_DTYPE: Final = "wrong_dtype"
WRONG_KEYS: Final = "wrong_keys"  # dict keys or tuple length

# correctness: well-formed but numerically wrong.
NUMERIC_MISMATCH: Final = "numeric_mismatch"
TIMED_OUTPUT_MISMATCH: Final = "timed_output_mismatch"  # right in the checked calls, wrong in the timed ones
HARNESS_OOM: Final = (
    "harness_oom"  # the trusted side ran out of GPU memory judging the outputs: no verdict on the candidate
)

# performance: correct but not timed to a trusted figure.
OVER_TIME_BUDGET: Final = "over_time_budget"
TIMING_TAMPERED: Final = "timing_tampered"  # timing or comparison primitives were replaced

CATEGORIES: Final[dict[str, tuple[str, ...]]] = {
    COMPILE: (
        SYNTAX_ERROR,
        IMPORT_ERROR,
        NO_MODEL,
        NOT_NN_MODULE,
        SIGNATURE_MISMATCH,
        COMPILE_TIMEOUT,
        COMPILE_OOM,
        KERNEL_COMPILE_ERROR,
    ),
    RUNTIME: (EXCEPTION, TIMEOUT, CUDA_FAULT, CRASH, OOM, WRONG_OUTPUT_TYPE, WRONG_SHAPE, WRONG_DTYPE, WRONG_KEYS),
    CORRECTNESS: (NUMERIC_MISMATCH, TIMED_OUTPUT_MISMATCH, HARNESS_OOM),
    PERFORMANCE: (OVER_TIME_BUDGET, TIMING_TAMPERED),
}

# not_run: the evaluation stopped before this shape was judged; not a verdict on the candidate.
# The stages whose categories a worker's own failure report may name (session.classify).
WORKER_STAGES: Final = (COMPILE, RUNTIME)

# Kept out of CATEGORIES (session.classify never accepts it from a worker).
NOT_RUN: Final = "not_run"
NOT_RUN_DEADLINE: Final = "not_run_deadline"  # the request's deadline_s passed
NOT_RUN_CANCELLED: Final = "not_run_cancelled"  # the caller cancelled
NOT_RUN_UNSELECTED: Final = "not_run_unselected"  # a sampled or budgeted benchmark run never started it
NOT_RUN_CATEGORIES: Final = (NOT_RUN_DEADLINE, NOT_RUN_CANCELLED, NOT_RUN_UNSELECTED)

# Integrity incidents: reported with the result, whatever the verdict.
FASTER_THAN_SOL: Final = "faster_than_sol"  # T_cand < T_SOL: an evaluation error, never a great score
SIDE_STREAM_WORK: Final = "side_stream_work"  # work ran past the call on another stream; counted in the time
PRIMITIVES_REPLACED: Final = "primitives_replaced"  # torch/time functions differ from those captured at start
WALL_CLOCK_INCONSISTENT: Final = "wall_clock_inconsistent"  # reported call times exceed the wall time they ran in
INPUT_MISMATCH: Final = "input_mismatch"  # the worker's generated inputs differ from the trusted side's
INPUT_REUSE_SPEEDUP: Final = "input_reuse_speedup"  # calls on an input set seen before ran much faster (a cache?)
REUSE_UNCHECKED: Final = "reuse_unchecked"  # input sets were timed again with too few calls for the reuse check
HIDDEN_DATA_LEAK: Final = (
    "hidden_data_leak"  # evaluator-only data appeared in text from the worker (trusted record only)
)
TIMING_FORGED: Final = "timing_forged"  # the reported time lies below the judge's own clock's witness (timing_witness)
REPLY_FORGED: Final = "reply_forged"  # a frame on the reply channel answered no request, or answered one twice
PROFILE_DISAGREES: Final = "profile_disagrees"  # the profiled forward's kernels took far longer than the reported time
INTEGRITY_INCIDENTS: Final = (
    FASTER_THAN_SOL,
    SIDE_STREAM_WORK,
    PRIMITIVES_REPLACED,
    WALL_CLOCK_INCONSISTENT,
    TIMED_OUTPUT_MISMATCH,
    INPUT_MISMATCH,
    INPUT_REUSE_SPEEDUP,
    REUSE_UNCHECKED,
    HIDDEN_DATA_LEAK,
    TIMING_FORGED,
    REPLY_FORGED,
    PROFILE_DISAGREES,
)
INTEGRITY_FAILS: Final = frozenset(
    {PRIMITIVES_REPLACED, WALL_CLOCK_INCONSISTENT, TIMED_OUTPUT_MISMATCH, REUSE_UNCHECKED, TIMING_FORGED, REPLY_FORGED}
)


def stage_of(category: str) -> str:
    """The stage a category belongs to (every category is in exactly one stage)."""
    for stage, names in {**CATEGORIES, NOT_RUN: NOT_RUN_CATEGORIES}.items():
        if category in names:
            return stage
    raise KeyError(f"unknown failure category {category!r}")
