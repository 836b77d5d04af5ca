"""Dispatch-level work/traffic counter for any problem, implementing the SPEC §0.5 rules on the
aten ops a reference actually executes.

Why our own TorchDispatchMode rather than torch.utils.flop_counter.FlopCounterMode: that mode
counts matmul/convolution/attention only, ignores causal masking in attention, and reports
neither dtype paths nor bytes; the §0.5 convention also counts elementwise arithmetic,
reductions, softmax and layer norm.

Rules per executed aten op (everything not listed counts 0: exp, rsqrt, pow, sigmoid, abs,
max, clamp, comparisons, where, top-k, cumsum, sort, casts, copies, indexing, cat, ...):
  mm / bmm / addmm / baddbmm / _scaled_mm / _int_mm / mv / dot   2*M*N*K (bias not counted)
  convolution                     2 * MACs (depthwise: 2 * outputs * kernel width)
  fused attention (SDPA kernels)  2*B*H*Lq*Lk*(Dqk + Dv), Lq*Lk -> sum_i min(i+1, Lk) if causal
  add / sub / rsub / mul / div    1 per output element;  addcmul / addcdiv 2
  silu 4 per element;  sum = in - out elements;  mean = in elements;  softmax = 4*N - rows
  native_layer_norm 5 per element + 1 each for weight and bias (7 with affine)
  _fused_rms_norm (F.rms_norm's kernel) 2 per element + 1 per row, + 1 per element with weight
    (what the decomposed path counts: mean of squares, + eps, * rsqrt, * weight)

Dtype path of the work: tensor-core ops (matmul, convolution, attention) by operand dtype
(bf16, fp16, any float8 -> fp8_e4m3, fp32 -> tf32 when the process allows TF32 for it, else
fp32, integers -> int); all other arithmetic runs on the CUDA cores: fp32 for every floating
dtype, int for integers and bools. float64 has no path and is filed under fp32 (optimistic).

Traffic: Q_read = bytes of every distinct input tensor, Q_write = bytes of every output tensor.

Storage label: the SPEC files all of an operator's W under one label, the dtype it stores, not
the dtype its reference computes in (references upcast to fp32 for accuracy; a kernel would not).
`CountResult.storage_path` is that label for any problem: the narrowest floating dtype among its
inputs and outputs (ties: the one holding more bytes), or int when nothing is floating. It
reproduces the SPEC label of all 30 shipped operators at their smoke shapes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from atrex_mcp.problemset.hardware import DtypePath
from atrex_mcp.problemset.roofline import Workload

_FP8 = {d for d in vars(torch).values() if isinstance(d, torch.dtype) and "float8" in str(d)}
_HALF_PATHS: dict[torch.dtype, DtypePath] = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def _numel(t: Any) -> int:
    return t.numel() if isinstance(t, torch.Tensor) else 0


def _tensor_core_path(dtype: torch.dtype, tf32_allowed: bool) -> DtypePath:
    if dtype in _HALF_PATHS:
        return _HALF_PATHS[dtype]
    if dtype in _FP8:
        return "fp8_e4m3"
    if dtype.is_floating_point:
        return "tf32" if tf32_allowed and dtype == torch.float32 else "fp32"
    return "int"


def _scalar_path(dtype: torch.dtype) -> DtypePath:
    return "fp32" if (dtype.is_floating_point or dtype.is_complex) else "int"


def _named(func: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The op's arguments by schema name, defaults filled in."""
    values: dict[str, Any] = {}
    for i, arg in enumerate(func._schema.arguments):
        if i < len(args):
            values[arg.name] = args[i]
        elif arg.name in kwargs:
            values[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            values[arg.name] = arg.default_value
    return values


def _matmul_tf32() -> bool:
    return torch.get_float32_matmul_precision() != "highest"


# --- per-op rules: (named args, output) -> (work, dtype path) ---------------------------------

Rule = Callable[[dict[str, Any], Any], tuple[int, DtypePath]]


def _mm_rule(a_name: str) -> Rule:
    """2 * (output elements) * (contraction length of operand `a_name`)."""

    def rule(a: dict[str, Any], out: Any) -> tuple[int, DtypePath]:
        x = a[a_name]
        return 2 * _numel(out) * x.shape[-1], _tensor_core_path(x.dtype, _matmul_tf32())

    return rule


def _dot(a: dict[str, Any], out: Any) -> tuple[int, DtypePath]:
    return 2 * _numel(a["self"]), _tensor_core_path(a["self"].dtype, _matmul_tf32())


def _convolution(a: dict[str, Any], out: Any) -> tuple[int, DtypePath]:
    x, w = a["input"], a["weight"]
    macs = (_numel(x) if a.get("transposed") else _numel(out)) * math.prod(w.shape[1:])
    return 2 * macs, _tensor_core_path(x.dtype, torch.backends.cudnn.allow_tf32)


def _attention(a: dict[str, Any], out: Any) -> tuple[int, DtypePath]:
    q, k, v = a["query"], a["key"], a["value"]
    lq, lk = q.shape[-2], k.shape[-2]
    pairs = sum(min(i + 1, lk) for i in range(lq)) if a.get("is_causal") else lq * lk
    heads = math.prod(q.shape[:-2])
    return 2 * heads * pairs * (q.shape[-1] + v.shape[-1]), _tensor_core_path(q.dtype, False)


def _per_output(flops: int) -> Rule:
    def rule(a: dict[str, Any], out: Any) -> tuple[int, DtypePath]:
        first = out if isinstance(out, torch.Tensor) else tree_leaves(out)[0]
        return flops * _numel(first), _scalar_path(first.dtype)

    return rule


def _sum(a: dict[str, Any], out: Any) -> tuple[int, DtypePath]:
    return _numel(a["self"]) - _numel(out), _scalar_path(out.dtype)


def _mean(a: dict[str, Any], out: Any) -> tuple[int, DtypePath]:
    return _numel(a["self"]), _scalar_path(out.dtype)


def _softmax(a: dict[str, Any], out: Any) -> tuple[int, DtypePath]:
    x = a["self"]
    n = _numel(x)
    rows = n // x.shape[a["dim"]] if x.dim() else n
    return 4 * n - rows, _scalar_path(out.dtype)


def _layer_norm(a: dict[str, Any], out: Any) -> tuple[int, DtypePath]:
    x = a["input"]
    per_element = 5 + (a.get("weight") is not None) + (a.get("bias") is not None)
    return per_element * _numel(x), _scalar_path(x.dtype)


def _rms_norm(a: dict[str, Any], out: Any) -> tuple[int, DtypePath]:
    x = a["input"]
    n = _numel(x)
    rows = n // max(math.prod(a["normalized_shape"]), 1)
    return (2 + (a.get("weight") is not None)) * n + rows, _scalar_path(x.dtype)


_RULES: dict[str, Rule] = {
    "mm": _mm_rule("self"),
    "bmm": _mm_rule("self"),
    "addmm": _mm_rule("mat1"),
    "baddbmm": _mm_rule("batch1"),
    "addbmm": lambda a, out: (
        2 * _numel(a["batch1"]) * a["batch2"].shape[-1],
        _tensor_core_path(a["batch1"].dtype, _matmul_tf32()),
    ),
    "_scaled_mm": _mm_rule("self"),
    "_int_mm": _mm_rule("self"),
    "mv": _mm_rule("self"),
    "addmv": _mm_rule("mat"),
    "dot": _dot,
    "vdot": _dot,
    "convolution": _convolution,
    "_convolution": _convolution,
    "_scaled_dot_product_flash_attention_for_cpu": _attention,
    "_scaled_dot_product_flash_attention": _attention,
    "_scaled_dot_product_efficient_attention": _attention,
    "_scaled_dot_product_cudnn_attention": _attention,
    "add": _per_output(1),
    "sub": _per_output(1),
    "rsub": _per_output(1),
    "mul": _per_output(1),
    "div": _per_output(1),
    "true_divide": _per_output(1),
    "floor_divide": _per_output(1),
    "addcmul": _per_output(2),
    "addcdiv": _per_output(2),
    "silu": _per_output(4),
    "sum": _sum,
    "mean": _mean,
    "_softmax": _softmax,
    "_safe_softmax": _softmax,
    "native_layer_norm": _layer_norm,
    "_fused_rms_norm": _rms_norm,
}


def _op_name(func: Any) -> str:
    """aten.add_.Tensor and aten.add.out both count as `add`."""
    name = func.overloadpacket.__name__
    return name[:-1] if name.endswith("_") and not name.startswith("_") else name


class WorkCounter(TorchDispatchMode):
    """Counts W per dtype path over every aten op executed inside the `with` block."""

    def __init__(self) -> None:
        super().__init__()
        self.flops: Counter[DtypePath] = Counter()
        self.by_op: Counter[tuple[str, DtypePath]] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        rule = _RULES.get(_op_name(func))
        if rule is not None:
            work, path = rule(_named(func, args, kwargs), out)
            if work:
                self.flops[path] += work
                self.by_op[(_op_name(func), path)] += work
        return out


def tensor_bytes(tree: Any) -> int:
    """Bytes of the distinct tensors in a (nested) container."""
    seen: dict[int, torch.Tensor] = {}
    for leaf in tree_leaves(tree):
        if isinstance(leaf, torch.Tensor):
            seen.setdefault(id(leaf), leaf)
    return sum(t.numel() * t.element_size() for t in seen.values())


def storage_path(*trees: Any) -> DtypePath:
    """The narrowest floating dtype stored in the trees (more bytes wins a tie), else int."""
    floating: Counter[torch.dtype] = Counter()
    for tree in trees:
        for leaf in tree_leaves(tree):
            if isinstance(leaf, torch.Tensor) and leaf.dtype.is_floating_point:
                floating[leaf.dtype] += leaf.numel() * leaf.element_size()
    if not floating:
        return "int"
    narrowest = min(floating, key=lambda d: (d.itemsize, -floating[d]))
    return _tensor_core_path(narrowest, tf32_allowed=False)


@dataclass
class CountResult:
    """What one forward pass did: the workload (W per executed dtype path), the work of each
    counted op, the storage label, and whether fake or real tensors were used."""

    workload: Workload
    storage_path: DtypePath
    by_op: dict[str, int] = field(default_factory=dict)
    tensors: str = "real"

    def labelled(self) -> Workload:
        """The workload with all W under the storage label, as the SPEC files shipped operators."""
        return self.workload.under_label(self.storage_path)


def count_forward(model: torch.nn.Module, inputs: dict[str, Any], *, tensors: str = "real") -> CountResult:
    """Run model(**inputs) under the counter; Q from the inputs and the returned outputs."""
    counter = WorkCounter()
    with torch.no_grad(), counter:
        out = model(**inputs)
    workload = Workload(flops=dict(counter.flops), bytes_read=tensor_bytes(inputs), bytes_written=tensor_bytes(out))
    by_op = {f"{name}[{path}]": w for (name, path), w in sorted(counter.by_op.items())}
    return CountResult(workload=workload, storage_path=storage_path(inputs, out), by_op=by_op, tensors=tensors)


def count_problem(
    model_cls: type,
    make_inputs: Callable[..., dict[str, Any]],
    init: dict[str, Any],
    shape_inputs: dict[str, Any],
    *,
    seed: int = 0,
    tensors: str = "auto",
) -> CountResult:
    """Count one shape of a problem.

    tensors="fake" runs on FakeTensors (shapes and dtypes only, no memory: fit for any size);
    "real" runs on CPU tensors (exact for data-dependent code such as MoE routing); "auto"
    tries fake and falls back to real when the reference branches on tensor values.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    def run(kind: str) -> CountResult:
        inputs = make_inputs(seed=seed, device="cpu", **shape_inputs)
        return count_forward(model_cls(**init), inputs, tensors=kind)

    if tensors == "fake":
        with FakeTensorMode():
            return run("fake")
    if tensors == "auto":
        try:
            with FakeTensorMode():
                return run("fake")
        except Exception:  # noqa: BLE001 - any fake-tensor limitation; the real run below is authoritative
            pass
    return run("real")
