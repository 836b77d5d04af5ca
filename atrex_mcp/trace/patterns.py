"""Operators written as several aten ops: `F.silu(g) * u`, a hand-written RMSNorm, a rotary
embedding from cos/sin, softmax then top-k gating, a K and a V cache write.

A pattern (rules.json `patterns`) is a list of steps; it matches consecutive host operators of one
thread that share a parent (siblings, in time order) and that no host rule claims. Between two
steps, view-only operators (`transparent`) and the pattern's `absorb` operators (dtype casts)
belong to the group; up to `max_gap` other operators may sit in between and stay outside it (the
up projection between `silu` and `mul` in a Hugging Face MLP). The profiler does not export tensor
identity, so "the same tensors" is read as equal recorded shapes, which the steps' `when`
predicates compare.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from atrex_mcp.trace import expr
from atrex_mcp.trace.events import HostEvent
from atrex_mcp.trace.rules import Binding, PatternRule, Rules, bind_arguments


@dataclass(eq=False)
class PatternGroup:
    """Host operators that together are one call of `op`: the matched steps and what sits between."""

    op: str
    rule: PatternRule
    nodes: list[HostEvent]
    steps: list[HostEvent]
    values: dict[str, Any]
    dtypes: dict[str, str]
    unrecorded: set[str] = field(default_factory=set)

    @property
    def ts(self) -> float:
        return self.nodes[0].ts

    def absorbed(self, node: HostEvent) -> bool:
        return not any(node is step for step in self.steps)

    def binding(self) -> Binding:
        """A fresh copy (shape resolution adds derived names)."""
        return Binding(dict(self.values), dict(self.dtypes), set(self.unrecorded))


def find_groups(host: list[HostEvent], rules: Rules, claimed: Callable[[HostEvent], bool]) -> list[PatternGroup]:
    """Every pattern match among unclaimed sibling cpu_ops, earliest first, each op in one group at most."""
    siblings: dict[Any, list[HostEvent]] = {}
    for ev in host:
        if ev.cat == "cpu_op":
            siblings.setdefault((ev.thread, id(ev.parent)), []).append(ev)
    compiled = [
        (rule, [re.compile(s.name) for s in rule.steps], re.compile(rule.absorb) if rule.absorb else None)
        for rule in rules.data.patterns
    ]
    groups: list[PatternGroup] = []
    for ops in siblings.values():
        ops.sort(key=lambda e: e.ts)
        free = [not claimed(op) for op in ops]
        i = 0
        while i < len(ops):
            group = None
            if free[i]:
                for rule, names, absorb in compiled:
                    group = _match_at(ops, free, i, rule, names, absorb, rules)
                    if group is not None:
                        break
            if group is None:
                i += 1
                continue
            groups.append(group)
            taken = {id(n) for n in group.nodes}
            for j, op in enumerate(ops):
                if id(op) in taken:
                    free[j] = False
            i += 1
    return groups


def _match_at(
    ops: list[HostEvent],
    free: list[bool],
    start: int,
    rule: PatternRule,
    names: list[re.Pattern],
    absorb: re.Pattern | None,
    rules: Rules,
) -> PatternGroup | None:
    binding = Binding({}, {}, set())
    steps: list[HostEvent] = []
    between: list[HostEvent] = []
    nodes: list[HostEvent] = []
    position = start
    for k, (step, pattern) in enumerate(zip(rule.steps, names)):
        found, skipped, gap = None, [], 0
        j = position
        while j < len(ops):
            op = ops[j]
            if not free[j]:
                if k == 0:
                    return None
                gap += 1
                if gap > rule.max_gap:
                    break
                j += 1
                continue
            if pattern.fullmatch(op.name) and _holds(step.when, step.args, op, binding, rules):
                found = j
                break
            if k == 0:
                return None
            if rules.is_transparent(op.name) or (absorb is not None and absorb.fullmatch(op.name)):
                skipped.append(op)
            else:
                gap += 1
                if gap > rule.max_gap:
                    break
            j += 1
        if found is None:
            if step.optional:
                continue
            return None
        op = ops[found]
        bound = bind_arguments(step.args, op.args)
        binding.values.update(bound.values)
        binding.dtypes.update(bound.dtypes)
        binding.unrecorded |= bound.unrecorded
        nodes.extend(between)
        between = []
        nodes.extend(skipped)
        nodes.append(op)
        steps.append(op)
        position = found + 1
    return PatternGroup(
        rule.operator,
        rule,
        sorted(nodes, key=lambda e: e.ts),
        steps,
        binding.values,
        binding.dtypes,
        binding.unrecorded,
    )


def _holds(when: str | None, args: list[str], op: HostEvent, binding: Binding, rules: Rules) -> bool:
    if "Input Dims" not in op.args:
        return when is None
    bound = bind_arguments(args, op.args)
    merged = Binding(
        {**binding.values, **bound.values}, {**binding.dtypes, **bound.dtypes}, binding.unrecorded | bound.unrecorded
    )
    if when is None:
        return True
    try:
        return bool(expr.evaluate(when, merged.values, rules.functions(merged)))
    except expr.ExprError:
        return False
