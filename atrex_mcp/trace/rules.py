"""The rules table: which host operators, ranges and kernels belong to which benchmark operator,
and how a host operator's recorded arguments become a shape in the problem's shapes.json form.

The table is data (`rules.json` next to this file, versioned); this module only loads, checks
and applies it. See docs/trace.md for the format and the reasoning behind each choice.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from atrex_mcp.errors import AtrexError
from atrex_mcp.trace import expr

DEFAULT_RULES = Path(__file__).with_name("rules.json")
OTHER = "other"

# "Input type" strings that torch.profiler writes → (short label used by shapes.json, torch name).
_DTYPES = {
    "c10::BFloat16": ("bf16", "bfloat16"),
    "c10::Half": ("fp16", "float16"),
    "float": ("fp32", "float32"),
    "double": ("fp64", "float64"),
    "c10::Float8_e4m3fn": ("fp8_e4m3fn", "float8_e4m3fn"),
    "c10::Float8_e4m3fnuz": ("fp8_e4m3fnuz", "float8_e4m3fnuz"),
    "c10::Float8_e5m2": ("fp8_e5m2", "float8_e5m2"),
    "int": ("int32", "int32"),
    "long int": ("int64", "int64"),
    "short int": ("int16", "int16"),
    "signed char": ("int8", "int8"),
    "unsigned char": ("uint8", "uint8"),
    "bool": ("bool", "bool"),
}
_NOT_TENSOR = frozenset({"", "Scalar", "ScalarList", "GenericList", "None"})


class HostRule(BaseModel):
    """A host operator (or record_function range) name that belongs to an operator."""

    name: str = Field(description="Regular expression that must match the whole event name, e.g. '_C::rms_norm'.")
    args: list[str] = Field(default_factory=list, description="Names for the recorded arguments, in schema order; '_' skips one.")
    when: str | None = Field(default=None, description="Expression over the arguments that must hold (a shape predicate).")
    derive: dict[str, str] = Field(default_factory=dict, description="Extra names computed from the arguments, e.g. top_k from a tensor's dims.")


class OperatorRule(BaseModel):
    """How one benchmark operator is recognised and how its calls become shapes."""

    host_ops: list[HostRule] = Field(default_factory=list, description="Host operators and ranges of this operator.")
    kernels: list[str] = Field(default_factory=list, description="Regular expressions searched in device kernel names (used when no host operator claims the kernel).")
    tokens: str | None = Field(default=None, description="Expression for the call's token count (phase inference and bucketing).")
    init: dict[str, str] = Field(default_factory=dict, description="Model.__init__ parameters as expressions.")
    inputs: dict[str, str] = Field(default_factory=dict, description="make_inputs parameters as expressions; bucket() rounds dynamic dims.")
    check: str | None = Field(default=None, description="Expression over arguments and resolved parameters that a resolved shape must satisfy.")


class TokenBuckets(BaseModel):
    """How dynamic dimensions are rounded so that near-duplicate shapes collapse."""

    kind: str = Field(description="'pow2' (next power of two), 'list' (next listed bound, then powers of two) or 'exact' (no rounding).")
    bounds: list[int] = Field(default_factory=list, description="Ascending upper bounds for kind 'list'.")

    @field_validator("kind")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in ("pow2", "list", "exact"):
            raise ValueError("kind must be 'pow2', 'list' or 'exact'")
        return value

    @field_validator("bounds")
    @classmethod
    def _ascending(cls, value: list[int]) -> list[int]:
        if any(b <= 0 for b in value) or any(b >= c for b, c in zip(value, value[1:])):
            raise ValueError("bounds must be positive and strictly ascending")
        return value

    def bucket(self, n: int) -> int:
        """The bucket's upper bound: the representative value written into shapes."""
        if not isinstance(n, int) or isinstance(n, bool):
            raise expr.ExprError(f"bucket() needs an integer, got {n!r}")
        if n <= 1 or self.kind == "exact":
            return n
        for bound in self.bounds if self.kind == "list" else ():
            if n <= bound:
                return bound
        return 1 << (n - 1).bit_length()


class RulesFile(BaseModel):
    """The whole rules table as stored in rules.json."""

    version: str = Field(description="Rules version, recorded in every snapshot's manifest.")
    phase_ranges: dict[str, str] = Field(description="Phase name → regular expression on record_function / NVTX range names.")
    decode_max_tokens: int = Field(description="Without a phase range, a step with at most this many tokens is decode.")
    token_buckets: TokenBuckets = Field(description="Bucket scheme for dynamic (token, batch, context) dimensions.")
    operators: dict[str, OperatorRule] = Field(description="Benchmark operator name → its rules.")


@dataclass(frozen=True)
class ResolvedShape:
    """A call's shape in shapes.json form, plus its raw token count and the parameters taken from defaults."""

    init: dict[str, Any]
    inputs: dict[str, Any]
    tokens: int
    defaulted: tuple[str, ...]

    @cached_property
    def key(self) -> str:
        """Canonical JSON of init and inputs: equal shapes, equal keys."""
        return json.dumps({"init": self.init, "inputs": self.inputs}, sort_keys=True)


@dataclass(frozen=True)
class HostMatch:
    op: str
    rule: HostRule


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


@dataclass
class Binding:
    """A call's recorded arguments under the rule's names.

    `values`: a tensor's dims list or a scalar's recorded value. `dtypes`: a tensor's recorded
    type. `unrecorded`: scalar arguments the profiler did not record (strings, None, or trailing
    arguments), the only ones whose parameters may fall back to the smoke shape's value.
    """

    values: dict[str, Any]
    dtypes: dict[str, str]
    unrecorded: set[str]


def bind_arguments(names: list[str], event_args: dict[str, Any]) -> Binding:
    """Bind a host operator's recorded arguments (Input Dims / Input type / Concrete Inputs) to names."""
    dims = event_args.get("Input Dims") or []
    types = event_args.get("Input type") or []
    concrete = event_args.get("Concrete Inputs") or []
    binding = Binding({}, {}, set())
    for i, name in enumerate(names):
        if name == "_":
            continue
        value = concrete[i] if i < len(concrete) else ""
        kind = types[i] if i < len(types) else ""
        if isinstance(value, str) and value != "":
            binding.values[name] = _literal(value)
        elif i < len(dims) and kind not in _NOT_TENSOR and isinstance(dims[i], list):
            binding.values[name] = list(dims[i])
            binding.dtypes[name] = kind
        elif dims and (i >= len(dims) or kind in _NOT_TENSOR):
            binding.unrecorded.add(name)
    return binding


class Rules:
    """A loaded, checked rules table with compiled patterns and per-name match caches."""

    def __init__(self, data: RulesFile, source: Path):
        self.data = data
        self.source = source
        self._host_patterns = [(op, rule, re.compile(rule.name)) for op, r in data.operators.items() for rule in r.host_ops]
        self._kernel_patterns = [(op, re.compile(p)) for op, r in data.operators.items() for p in r.kernels]
        self._phase_patterns = [(phase, re.compile(p)) for phase, p in data.phase_ranges.items()]
        self._kernel_cache: dict[str, str | None] = {}
        self._range_cache: dict[str, str | None] = {}
        self._phase_cache: dict[str, str | None] = {}
        self._host_cache: dict[str, list[tuple[str, HostRule]]] = {}
        self._shape_cache: dict[tuple, tuple[int | None, ResolvedShape | None, str | None]] = {}

    @classmethod
    def load(cls, path: Path | None = None) -> Rules:
        path = Path(path or DEFAULT_RULES)
        try:
            data = RulesFile.model_validate_json(path.read_bytes())
        except OSError as exc:
            raise AtrexError("input", "bad_rules", f"Cannot read rules table {path}: {exc}.") from exc
        except ValidationError as exc:
            raise AtrexError("input", "bad_rules", f"Rules table {path} is malformed: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}.") from None
        try:
            for op, rule in data.operators.items():
                for source in [rule.tokens, rule.check, *rule.init.values(), *rule.inputs.values(),
                               *(h.when for h in rule.host_ops), *(e for h in rule.host_ops for e in h.derive.values())]:
                    if source is not None:
                        expr.parse(source)
                for pattern in [*(h.name for h in rule.host_ops), *rule.kernels]:
                    re.compile(pattern)
            for pattern in data.phase_ranges.values():
                re.compile(pattern)
        except (expr.ExprError, re.error) as exc:
            raise AtrexError("input", "bad_rules", f"Rules table {path}, operator {op}: {exc}.") from None
        return cls(data, path)

    @property
    def version(self) -> str:
        return self.data.version

    @cached_property
    def operators(self) -> list[str]:
        return list(self.data.operators)

    def phase_of_range(self, name: str) -> str | None:
        """'prefill' / 'decode' when a range name marks a phase."""
        if name not in self._phase_cache:
            self._phase_cache[name] = next((phase for phase, pattern in self._phase_patterns if pattern.fullmatch(name)), None)
        return self._phase_cache[name]

    def match_host(self, name: str, event_args: dict[str, Any]) -> HostMatch | None:
        """The first host rule whose name matches and whose predicate holds for these arguments."""
        if name not in self._host_cache:
            self._host_cache[name] = [(op, rule) for op, rule, pattern in self._host_patterns if pattern.fullmatch(name)]
        for op, rule in self._host_cache[name]:
            if rule.when is None:
                return HostMatch(op, rule)
            binding = bind_arguments(rule.args, event_args)
            try:
                if expr.evaluate(rule.when, binding.values, self._functions(binding.dtypes)):
                    return HostMatch(op, rule)
            except expr.ExprError:
                continue
        return None

    def match_range(self, name: str) -> str | None:
        """A record_function / NVTX range named like an operator's host op (no predicate to test)."""
        if name not in self._range_cache:
            self._range_cache[name] = next(
                (op for op, rule, pattern in self._host_patterns if rule.when is None and pattern.fullmatch(name)), None)
        return self._range_cache[name]

    def match_kernel(self, name: str) -> str | None:
        if name not in self._kernel_cache:
            self._kernel_cache[name] = next((op for op, pattern in self._kernel_patterns if pattern.search(name)), None)
        return self._kernel_cache[name]

    def _functions(self, dtypes: dict[str, str]) -> dict[str, Any]:
        def label(name: str, which: int) -> str:
            if name not in dtypes:
                raise expr.UnboundName(name)
            return _DTYPES.get(dtypes[name], (dtypes[name], dtypes[name]))[which]

        return {"bucket": self.data.token_buckets.bucket,
                "dtype": lambda name: label(name, 0),
                "torch_dtype": lambda name: label(name, 1)}

    def resolve_shape(self, match: HostMatch, event_args: dict[str, Any], smoke_init: dict[str, Any] | None,
                      smoke_inputs: dict[str, Any] | None) -> tuple[int | None, ResolvedShape | None, str | None]:
        """(token count, shape, why there is no shape) for one call; calls with identical recorded
        arguments (most of a serving trace) share one evaluation."""
        key = (match.op, id(match.rule), repr(event_args.get("Input Dims")), repr(event_args.get("Input type")),
               repr(event_args.get("Concrete Inputs")), repr(smoke_init), repr(smoke_inputs))
        if key not in self._shape_cache:
            self._shape_cache[key] = self._resolve_shape(match, event_args, smoke_init, smoke_inputs)
        return self._shape_cache[key]

    def _resolve_shape(self, match: HostMatch, event_args: dict[str, Any], smoke_init: dict[str, Any] | None,
                       smoke_inputs: dict[str, Any] | None) -> tuple[int | None, ResolvedShape | None, str | None]:
        """(token count, shape, why there is no shape) for one call.

        A parameter the rules do not give, or whose expression needs a scalar the profiler did not
        record (a string, None), takes the shipped smoke shape's value and is listed in `defaulted`;
        anything else that fails (a missing tensor, a wrong rank, a failed check) leaves the call
        without a shape. Without a smoke shape (operator absent from the problem set) there is none.
        """
        rule = self.data.operators[match.op]
        if "Input Dims" not in event_args:
            return None, None, "no recorded argument shapes (profile with record_shapes=True)"
        binding = bind_arguments(match.rule.args, event_args)
        values = binding.values
        functions = self._functions(binding.dtypes)
        try:
            for name, source in match.rule.derive.items():
                values[name] = expr.evaluate(source, values, functions)
            if rule.tokens is None:
                return None, None, f"the rules give no token expression for {match.op}"
            tokens = expr.evaluate(rule.tokens, values, functions)
            if not isinstance(tokens, int) or isinstance(tokens, bool):
                return None, None, f"token expression gave {tokens!r}"
        except expr.ExprError as exc:
            return None, None, f"no token count: {exc}"
        if smoke_init is None or smoke_inputs is None:
            return tokens, None, f"{match.op} is not in the problem set"
        defaulted: list[str] = []

        def fill(template: dict[str, Any], sources: dict[str, str], names: dict[str, Any]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for param, default in template.items():
                if param not in sources:
                    out[param] = default
                    defaulted.append(param)
                    continue
                try:
                    out[param] = expr.evaluate(sources[param], names, functions)
                except expr.UnboundName as exc:
                    if exc.name not in binding.unrecorded:
                        raise expr.ExprError(f"{param}: argument {exc.name!r} is not in the trace") from None
                    out[param] = default
                    defaulted.append(param)
            return out

        try:
            init = fill(smoke_init, rule.init, values)
            inputs = fill(smoke_inputs, rule.inputs, {**init, **values})
            if rule.check is not None and not expr.evaluate(rule.check, {**init, **inputs, **values}, functions):
                return tokens, None, f"fails the rule's check {rule.check!r} (defaulted: {', '.join(defaulted) or 'none'})"
        except expr.ExprError as exc:
            return tokens, None, str(exc)
        return tokens, ResolvedShape(init=init, inputs=inputs, tokens=tokens, defaulted=tuple(sorted(set(defaulted)))), None
