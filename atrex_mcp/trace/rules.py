"""The rules table: which host operators, ranges and kernels belong to which benchmark operator,
and how a host operator's recorded arguments become a shape in the problem's shapes.json form.

The table is data (`rules.json` next to this file, versioned); this module only loads, checks
and applies it. See docs/trace.md for the format and the reasoning behind each choice.
"""

from __future__ import annotations

import ast
import itertools
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
UNKNOWN_CATEGORY = "unknown"

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
_WRAPPED_SCALARS = frozenset({"double", "float", "long int", "int", "bool"})


class ShapeSource(BaseModel):
    """How one way of recognising an operator turns what it binds into a shape; each field, when
    given, overrides the operator's own expression (a null `init`/`inputs` entry takes the smoke
    shape's value and is listed as defaulted)."""

    derive: dict[str, str] = Field(
        default_factory=dict,
        description=("Extra names computed from the arguments, in order, e.g. top_k from a tensor's dims."),
    )
    unrecorded: list[str] = Field(
        default_factory=list,
        description=(
            "Names this source can never record; parameters that need them take the smoke shape's value (listed as"
            " defaulted)."
        ),
    )
    tokens: str | None = Field(default=None, description="Token-count expression replacing the operator's.")
    init: dict[str, str | None] = Field(
        default_factory=dict,
        description=("Model.__init__ expressions replacing the operator's (null: smoke value, defaulted)."),
    )
    inputs: dict[str, str | None] = Field(
        default_factory=dict,
        description=("make_inputs expressions replacing the operator's (null: smoke value, defaulted)."),
    )
    check: str | None = Field(default=None, description="Expression that must also hold, besides the operator's check.")
    stack: str | None = Field(
        default=None, description=("Key of the `stacks` table: the framework (and versions) this name comes from.")
    )


class HostRule(ShapeSource):
    """A host operator (or record_function range) name that belongs to an operator."""

    name: str = Field(description="Regular expression that must match the whole event name, e.g. '_C::rms_norm'.")
    args: list[str] = Field(
        default_factory=list, description="Names for the recorded arguments, in schema order; '_' skips one."
    )
    when: str | None = Field(
        default=None, description="Expression over the arguments that must hold (a shape predicate)."
    )


class PatternStep(BaseModel):
    """One host operator of a pattern."""

    name: str = Field(description="Regular expression that must match the whole operator name, e.g. 'aten::silu'.")
    args: list[str] = Field(
        default_factory=list,
        description=(
            "Names for its recorded arguments, in schema order ('_' skips one); names are shared by all steps."
        ),
    )
    when: str | None = Field(
        default=None, description=("Expression over this and the earlier steps' names that must hold.")
    )
    optional: bool = Field(default=False, description="The pattern also matches without this step.")


class PatternRule(ShapeSource):
    """Consecutive unclaimed host operators on one thread (siblings in time order) that together
    compute one benchmark operator, e.g. aten::silu then aten::mul on tensors of the same shape."""

    operator: str = Field(description="Benchmark operator the group is.")
    steps: list[PatternStep] = Field(description="The operators in order.")
    max_gap: int = Field(
        default=2,
        description=(
            "At most this many unrelated operators (not view-only, not `absorb`) between two steps; they stay outside"
            " the group."
        ),
    )
    absorb: str | None = Field(
        default=None,
        description=(
            "Regular expression of operators that belong to the group when they sit between its steps (e.g. dtype"
            " casts)."
        ),
    )


class GeneratedRules(BaseModel):
    """Compiler-generated kernels (torch.compile / Inductor) whose names list the aten ops they fuse."""

    stack: str = Field(description="Key of the `stacks` table.")
    name: str = Field(
        description=(
            "Regular expression with a group 'ops' (the fused aten op names joined by '_'), searched in host-event and"
            " kernel names."
        )
    )
    fusions: list[dict[str, Any]] = Field(
        description=(
            "{'operator': op, 'all': [aten op names]}: a kernel whose op list holds all of them computes (part of) that"
            " operator."
        )
    )
    shapes: dict[str, ShapeSource] = Field(
        default_factory=dict,
        description=(
            "Per operator, expressions over a generated kernel's recorded arguments: t0, t1, … (tensor dims in order),"
            " tl (the last tensor), n0, n1, … (integer arguments)."
        ),
    )


class UnmappedCategory(BaseModel):
    """A kind of device time that is not a benchmark operator (GEMM, communication, memory, …)."""

    name: str = Field(description="Short key, e.g. 'gemm'.")
    label: str = Field(description="What a user reads in the summary, e.g. 'GEMM (not a benchmark operator)'.")
    host: list[str] = Field(
        default_factory=list,
        description=(
            "Regular expressions matched against the whole names of the launching host operator and its ancestors."
        ),
    )
    kernels: list[str] = Field(default_factory=list, description="Regular expressions searched in device event names.")
    device_categories: list[str] = Field(
        default_factory=list,
        description=("Trace categories of device events that belong here (gpu_memcpy, gpu_memset)."),
    )


class OperatorRule(BaseModel):
    """How one benchmark operator is recognised and how its calls become shapes."""

    host_ops: list[HostRule] = Field(default_factory=list, description="Host operators and ranges of this operator.")
    kernels: list[str] = Field(
        default_factory=list,
        description="Regular expressions searched in device kernel names (used when no host operator claims the "
        "kernel).",
    )
    tokens: str | None = Field(
        default=None, description="Expression for the call's token count (phase inference and bucketing)."
    )
    init: dict[str, str] = Field(default_factory=dict, description="Model.__init__ parameters as expressions.")
    inputs: dict[str, str] = Field(
        default_factory=dict, description="make_inputs parameters as expressions; bucket() rounds dynamic dims."
    )
    check: str | None = Field(
        default=None,
        description="Expression over arguments and resolved parameters that a resolved shape must satisfy.",
    )
    benchmark: bool = Field(
        default=True,
        description=(
            "False for an operator the rules recognise but the benchmark does not define (reported, never retained"
            " unless a problem set adds it)."
        ),
    )


class TokenBuckets(BaseModel):
    """How dynamic dimensions are rounded so that near-duplicate shapes collapse."""

    kind: str = Field(
        description="'pow2' (next power of two), 'list' (next listed bound, then powers of two) or 'exact' (no "
        "rounding)."
    )
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
        if any(b <= 0 for b in value) or any(b >= c for b, c in itertools.pairwise(value)):
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
    phase_ranges: dict[str, str] = Field(
        description="Phase name → regular expression on record_function / NVTX range names."
    )
    decode_max_tokens: int = Field(description="Without a phase range, a step with at most this many tokens is decode.")
    token_buckets: TokenBuckets = Field(description="Bucket scheme for dynamic (token, batch, context) dimensions.")
    stacks: dict[str, str] = Field(
        default_factory=dict, description=("Framework key → the versions its names were taken from.")
    )
    transparent: str = Field(
        default="$^", description=("Regular expression of view-only host operators that patterns step over.")
    )
    operators: dict[str, OperatorRule] = Field(description="Benchmark operator name → its rules.")
    patterns: list[PatternRule] = Field(
        default_factory=list,
        description=("Groups of consecutive host operators that compute one operator, tried in order."),
    )
    generated: GeneratedRules | None = Field(
        default=None, description=("Attribution of compiler-generated kernels by the ops their names list.")
    )
    unmapped_categories: list[UnmappedCategory] = Field(
        default_factory=list, description=("What unmapped time is, tried in order; the rest is 'unknown'.")
    )


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


@dataclass(frozen=True)
class GeneratedMatch:
    """A compiler-generated kernel: the operators its fused op list computes (several: a fusion
    across operators), and the normalised name (numeric suffix removed) it is reported under."""

    ops: tuple[str, ...]
    kernel: str


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
        elif i < len(dims) and dims[i] == [] and kind in _WRAPPED_SCALARS:
            binding.unrecorded.add(name)  # `tensor + 1e-6`: a wrapped Python number, value not recorded
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
        self._host_patterns = [
            (op, rule, re.compile(rule.name)) for op, r in data.operators.items() for rule in r.host_ops
        ]
        self._kernel_patterns = [(op, re.compile(p)) for op, r in data.operators.items() for p in r.kernels]
        self._phase_patterns = [(phase, re.compile(p)) for phase, p in data.phase_ranges.items()]
        self._kernel_cache: dict[str, str | None] = {}
        self._range_cache: dict[str, str | None] = {}
        self._phase_cache: dict[str, str | None] = {}
        self._host_cache: dict[str, list[tuple[str, HostRule]]] = {}
        self._shape_cache: dict[tuple, tuple[int | None, ResolvedShape | None, str | None]] = {}
        self._generated_cache: dict[str, GeneratedMatch | None] = {}
        self._generated_pattern = re.compile(data.generated.name) if data.generated else None
        self._transparent = re.compile(data.transparent)
        self._categories = [
            (c.name, [re.compile(p) for p in c.host], [re.compile(p) for p in c.kernels], set(c.device_categories))
            for c in data.unmapped_categories
        ]

    @classmethod
    def load(cls, path: Path | None = None) -> Rules:
        path = Path(path or DEFAULT_RULES)
        try:
            data = RulesFile.model_validate_json(path.read_bytes())
        except OSError as exc:
            raise AtrexError("input", "bad_rules", f"Cannot read rules table {path}: {exc}.") from exc
        except ValidationError as exc:
            raise AtrexError(
                "input",
                "bad_rules",
                f"Rules table {path} is malformed: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}.",
            ) from None
        where = "table"
        try:
            for op, rule in data.operators.items():
                where = f"operator {op}"
                for source in [rule.tokens, rule.check, *rule.init.values(), *rule.inputs.values()]:
                    if source is not None:
                        expr.parse(source)
                for host in rule.host_ops:
                    _check_source(host, data, [host.when])
                    re.compile(host.name)
                for pattern in rule.kernels:
                    re.compile(pattern)
            for i, pattern_rule in enumerate(data.patterns):
                where = f"pattern {i} ({pattern_rule.operator})"
                if pattern_rule.operator not in data.operators:
                    raise expr.ExprError(f"unknown operator {pattern_rule.operator!r}")
                _check_source(pattern_rule, data, [step.when for step in pattern_rule.steps])
                for regex in [*(step.name for step in pattern_rule.steps), pattern_rule.absorb]:
                    if regex is not None:
                        re.compile(regex)
            if data.generated is not None:
                where = "generated"
                if "ops" not in re.compile(data.generated.name).groupindex:
                    raise expr.ExprError("the generated-kernel name pattern needs a group named 'ops'")
                for fusion in data.generated.fusions:
                    if fusion.get("operator") not in data.operators or not isinstance(fusion.get("all"), list):
                        raise expr.ExprError(f"fusion {fusion!r} needs a known 'operator' and an 'all' list")
                for shape_source in data.generated.shapes.values():
                    _check_source(shape_source, data, [])
            for category in data.unmapped_categories:
                where = f"unmapped category {category.name}"
                for regex in [*category.host, *category.kernels]:
                    re.compile(regex)
            where = "phase ranges / transparent"
            for pattern in [*data.phase_ranges.values(), data.transparent]:
                re.compile(pattern)
        except (expr.ExprError, re.error) as exc:
            raise AtrexError("input", "bad_rules", f"Rules table {path}, {where}: {exc}.") from None
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
            self._phase_cache[name] = next(
                (phase for phase, pattern in self._phase_patterns if pattern.fullmatch(name)), None
            )
        return self._phase_cache[name]

    def match_host(self, name: str, event_args: dict[str, Any]) -> HostMatch | None:
        """The first host rule whose name matches and whose predicate holds for these arguments."""
        if name not in self._host_cache:
            self._host_cache[name] = [
                (op, rule) for op, rule, pattern in self._host_patterns if pattern.fullmatch(name)
            ]
        for op, rule in self._host_cache[name]:
            if rule.when is None:
                return HostMatch(op, rule)
            binding = bind_arguments(rule.args, event_args)
            try:
                if expr.evaluate(rule.when, binding.values, self.functions(binding)):
                    return HostMatch(op, rule)
            except expr.ExprError:
                continue
        return None

    def match_range(self, name: str) -> str | None:
        """A record_function / NVTX range named like an operator's host op (no predicate to test)."""
        if name not in self._range_cache:
            self._range_cache[name] = next(
                (op for op, rule, pattern in self._host_patterns if rule.when is None and pattern.fullmatch(name)), None
            )
        return self._range_cache[name]

    def match_kernel(self, name: str) -> str | None:
        if name not in self._kernel_cache:
            self._kernel_cache[name] = next((op for op, pattern in self._kernel_patterns if pattern.search(name)), None)
        return self._kernel_cache[name]

    def match_generated(self, name: str) -> GeneratedMatch | None:
        """A compiler-generated kernel name (host launch event or device kernel) and what it computes:
        GeneratedMatch with no operator when it fuses none of the benchmark's operators."""
        if self.data.generated is None:
            return None
        if name not in self._generated_cache:
            assert self._generated_pattern is not None  # compiled whenever data.generated is set
            found = self._generated_pattern.search(name)
            if found is None:
                self._generated_cache[name] = None
            else:
                ops_text = "_" + (found["ops"] or "") + "_"
                ops = tuple(
                    dict.fromkeys(
                        f["operator"]
                        for f in self.data.generated.fusions
                        if all(f"_{part}_" in ops_text for part in f["all"])
                    )
                )
                self._generated_cache[name] = GeneratedMatch(ops, re.sub(r"_\d+$", "", found.group(0)))
        return self._generated_cache[name]

    def unmapped_category(self, names: list[str], device_name: str, device_cat: str) -> tuple[str, str]:
        """(category, the name that decided it) for unmapped device time: kernel names first, then the
        device event's category, then the launching host operator and its ancestors (innermost first)."""
        for category, _host, kernels, cats in self._categories:
            if any(p.search(device_name) for p in kernels) or device_cat in cats:
                return category, device_name
        for name in names:
            for category, host, _kernels, _cats in self._categories:
                if any(p.fullmatch(name) for p in host):
                    return category, name
        if names:
            return "other_ops", names[0]
        return UNKNOWN_CATEGORY, device_name

    def category_label(self, category: str) -> str:
        labels = {c.name: c.label for c in self.data.unmapped_categories}
        labels.setdefault("other_ops", "other framework operators (no benchmark operator)")
        labels.setdefault("generated", "compiler-generated kernels that fuse no benchmark operator")
        labels.setdefault(UNKNOWN_CATEGORY, "unknown (no host operator or name to tell)")
        return labels.get(category, category)

    def is_transparent(self, name: str) -> bool:
        return self._transparent.fullmatch(name) is not None

    def functions(self, binding: Binding) -> dict[str, Any]:
        dtypes = binding.dtypes

        def label(name: str, which: int) -> str:
            if name not in dtypes:
                raise expr.UnboundName(name)
            return _DTYPES.get(dtypes[name], (dtypes[name], dtypes[name]))[which]

        return {
            "bucket": self.data.token_buckets.bucket,
            "dtype": lambda name: label(name, 0),
            "torch_dtype": lambda name: label(name, 1),
            "given": lambda name: name in binding.values,
        }

    def resolve_shape(
        self,
        match: HostMatch,
        event_args: dict[str, Any],
        smoke_init: dict[str, Any] | None,
        smoke_inputs: dict[str, Any] | None,
    ) -> tuple[int | None, ResolvedShape | None, str | None]:
        """(token count, shape, why there is no shape) for one host-op call; calls with identical
        recorded arguments (most of a serving trace) share one evaluation."""
        if "Input Dims" not in event_args:
            return None, None, "no recorded argument shapes (profile with record_shapes=True)"
        key = (match.op, id(match.rule), _args_key(event_args), repr(smoke_init), repr(smoke_inputs))
        if key not in self._shape_cache:
            binding = bind_arguments(match.rule.args, event_args)
            self._shape_cache[key] = self.resolve_bound(match.op, match.rule, binding, smoke_init, smoke_inputs)
        return self._shape_cache[key]

    def resolve_bound(
        self,
        op: str,
        source: ShapeSource,
        binding: Binding,
        smoke_init: dict[str, Any] | None,
        smoke_inputs: dict[str, Any] | None,
    ) -> tuple[int | None, ResolvedShape | None, str | None]:
        """(token count, shape, why there is no shape) for one call whose arguments are bound.

        A parameter the rules do not give (or give as null), or whose expression needs a value the
        source cannot record (a string, None, a name in `unrecorded`), takes the shipped smoke
        shape's value and is listed in `defaulted`; anything else that fails (a missing tensor, a
        wrong rank, a failed check) leaves the call without a shape, the reason naming the field.
        Without a smoke shape (operator absent from the problem set) there is none.
        """
        rule = self.data.operators[op]
        binding.unrecorded.update(source.unrecorded)
        values = binding.values
        functions = self.functions(binding)
        tokens_source = source.tokens or rule.tokens
        try:
            for name, text in source.derive.items():
                try:
                    values[name] = expr.evaluate(text, values, functions)
                except expr.UnboundName as exc:
                    if exc.name not in binding.unrecorded:
                        raise
                    binding.unrecorded.add(name)
            if tokens_source is None:
                return None, None, f"the rules give no token expression for {op}"
            tokens = expr.evaluate(tokens_source, values, functions)
            if not isinstance(tokens, int) or isinstance(tokens, bool):
                return None, None, f"token expression gave {tokens!r}"
        except expr.ExprError as exc:
            return None, None, f"no token count: {exc}"
        if smoke_init is None or smoke_inputs is None:
            return tokens, None, f"{op} is not in the problem set"
        defaulted: list[str] = []

        def fill(template: dict[str, Any], sources: dict[str, str | None], names: dict[str, Any]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for param, default in template.items():
                text = sources.get(param)
                if text is None:
                    out[param] = default
                    defaulted.append(param)
                    continue
                try:
                    out[param] = expr.evaluate(text, names, functions)
                except expr.UnboundName as exc:
                    if exc.name not in binding.unrecorded:
                        raise expr.ExprError(
                            f"shape incomplete: {param} needs {exc.name!r}, which the trace does not record"
                        ) from None
                    out[param] = default
                    defaulted.append(param)
                except expr.ExprError as exc:
                    raise expr.ExprError(f"shape incomplete: {param}: {exc}") from None
            return out

        try:
            init = fill(smoke_init, {**rule.init, **source.init}, values)
            inputs = fill(smoke_inputs, {**rule.inputs, **source.inputs}, {**init, **values})
            names = {**init, **inputs, **values}
            for check in (rule.check, source.check):
                if check is not None and not expr.evaluate(check, names, functions):
                    return (
                        tokens,
                        None,
                        (f"fails the rule's check {check!r} (defaulted: {', '.join(defaulted) or 'none'})"),
                    )
        except expr.ExprError as exc:
            return tokens, None, str(exc)
        return (
            tokens,
            ResolvedShape(init=init, inputs=inputs, tokens=tokens, defaulted=tuple(sorted(set(defaulted)))),
            None,
        )


def _args_key(event_args: dict[str, Any]) -> str:
    return repr((event_args.get("Input Dims"), event_args.get("Input type"), event_args.get("Concrete Inputs")))


def _check_source(source: ShapeSource, data: RulesFile, extra: list[str | None]) -> None:
    """Parse every expression of a shape source and check its stack key (a bad table fails at load)."""
    for text in [
        source.tokens,
        source.check,
        *source.derive.values(),
        *source.init.values(),
        *source.inputs.values(),
        *extra,
    ]:
        if text is not None:
            expr.parse(text)
    if source.stack is not None and source.stack not in data.stacks:
        raise expr.ExprError(f"stack {source.stack!r} is not in the rules' stacks table")
