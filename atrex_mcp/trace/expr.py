"""The small expression language of the rules table.

A rule says how a host operator's recorded arguments become a benchmark shape, e.g.
`"token_count": "bucket(prod(x[:-1]))"`. Expressions are parsed with `ast` and evaluated by
walking a whitelist of node types, so a rules file can compute with dimensions but can never
run code: names are argument bindings (a tensor's dims list, or a scalar's recorded value),
calls are limited to the functions in `FUNCTIONS` plus the ones the caller binds.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any


class ExprError(ValueError):
    """An expression that cannot be evaluated against this call (bad rank, missing argument…)."""


class UnboundName(ExprError):
    """The expression names an argument the trace did not record (e.g. a string or None)."""

    def __init__(self, name: str):
        super().__init__(f"argument {name!r} was not recorded")
        self.name = name


def split_evenly(total: int, parts: int) -> list[int]:
    """`parts` lengths that differ by at most one and sum to `total` (earlier parts take the remainder)."""
    if parts <= 0 or total < parts:
        raise ExprError(f"cannot split {total} tokens into {parts} non-empty sequences")
    base, extra = divmod(total, parts)
    return [base + 1 if i < extra else base for i in range(parts)]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "len": len,
    "min": min,
    "max": max,
    "sum": sum,
    "int": int,
    "prod": math.prod,
    "ceil_div": _ceil_div,
    "split": split_evenly,
}

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


@lru_cache(maxsize=4096)
def parse(source: str) -> ast.expr:
    """Parse once and check every node against the whitelist (a bad rules file fails at load time)."""
    try:
        tree = ast.parse(source, mode="eval").body
    except SyntaxError as exc:
        raise ExprError(f"invalid expression {source!r}: {exc.msg}") from None
    allowed = (
        ast.Name,
        ast.Constant,
        ast.List,
        ast.Tuple,
        ast.Subscript,
        ast.Slice,
        ast.BinOp,
        ast.UnaryOp,
        ast.Compare,
        ast.BoolOp,
        ast.IfExp,
        ast.Call,
        ast.Load,
        ast.And,
        ast.Or,
        ast.USub,
        ast.Not,
        *_BINARY,
        *_COMPARE,
    )
    for node in ast.walk(tree):
        if not isinstance(node, allowed):
            raise ExprError(f"expression {source!r} uses {type(node).__name__}, which rules may not use")
        if isinstance(node, ast.Call) and not isinstance(node.func, ast.Name):
            raise ExprError(f"expression {source!r}: only plain function names may be called")
    return tree


def evaluate(source: str, names: Mapping[str, Any], functions: Mapping[str, Callable[..., Any]] | None = None) -> Any:
    """Evaluate `source` with `names` bound; ExprError when it does not apply to these arguments."""
    calls = {**FUNCTIONS, **(functions or {})}
    tree = parse(source)
    try:
        return _eval(tree, names, calls)
    except ExprError:
        raise
    except (IndexError, TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
        raise ExprError(f"{source!r}: {type(exc).__name__}: {exc}") from None


def _eval(node: ast.expr, names: Mapping[str, Any], calls: Mapping[str, Callable[..., Any]]) -> Any:
    match node:
        case ast.Constant(value=value):
            return value
        case ast.Name(id=name):
            if name not in names:
                raise UnboundName(name)
            return names[name]
        case ast.List(elts=elts) | ast.Tuple(elts=elts):
            return [_eval(e, names, calls) for e in elts]
        case ast.Subscript(value=value, slice=ast.Slice(lower=lo, upper=hi, step=None)):
            seq = _eval(value, names, calls)
            return seq[
                slice(None if lo is None else _eval(lo, names, calls), None if hi is None else _eval(hi, names, calls))
            ]
        case ast.Subscript(value=value, slice=index):
            return _eval(value, names, calls)[_eval(index, names, calls)]
        case ast.BinOp(left=left, op=op, right=right):
            return _BINARY[type(op)](_eval(left, names, calls), _eval(right, names, calls))
        case ast.UnaryOp(op=ast.USub(), operand=operand):
            return -_eval(operand, names, calls)
        case ast.UnaryOp(op=ast.Not(), operand=operand):
            return not _eval(operand, names, calls)
        case ast.BoolOp(op=ast.And(), values=values):
            return all(_eval(v, names, calls) for v in values)
        case ast.BoolOp(op=ast.Or(), values=values):
            return any(_eval(v, names, calls) for v in values)
        case ast.Compare(left=left, ops=ops, comparators=comparators):
            current = _eval(left, names, calls)
            for cmp, comp in zip(ops, comparators):
                right = _eval(comp, names, calls)
                if not _COMPARE[type(cmp)](current, right):
                    return False
                current = right
            return True
        case ast.IfExp(test=test, body=body, orelse=orelse):
            return _eval(body if _eval(test, names, calls) else orelse, names, calls)
        case ast.Call(func=ast.Name(id=fname), args=args, keywords=[]):
            if fname not in calls:
                raise ExprError(f"unknown function {fname!r}")
            return calls[fname](*[_eval(a, names, calls) for a in args])
    raise ExprError(f"unsupported expression node {type(node).__name__}")
