"""`atrex-mcp problems list|show|init|add|build|check`: the problem set from a shell (trusted side:
`list` shows weights and `show --hidden` the evaluator-only files)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import BaseModel, Field

from atrex_mcp.commands.grammar import add_problems_option, shared_options


class ProblemSummary(BaseModel):
    """One line of `problems list --json`."""

    name: str = Field(description="Operator (problem folder) name.")
    num_shapes: int = Field(description="Number of scored shapes (the smoke shape is not counted).")
    weight: float = Field(
        description="Importance weight in S_agg, normalised over the catalog's operators "
        "(sum 1; all 0 when no operator has a weight)."
    )
    dtype: str = Field(description="Dtype label of the operator's work (metadata.json).")
    phase: str = Field(description="Serving phase: prefill, decode or prefill/decode.")


def register(subparsers) -> None:
    parser = subparsers.add_parser("problems", help="list, inspect, create, add, build and check problems")
    sub = parser.add_subparsers(dest="problems_command", metavar="ACTION", required=True)

    lst = sub.add_parser("list", help="operators with scored-shape count, weight, dtype and phase")
    lst.add_argument("--json", action="store_true", help="print a JSON list")

    show = sub.add_parser("show", help="one problem's visible files (and, with --hidden, the evaluator's)")
    show.add_argument("op")
    show.add_argument("--hidden", action="store_true", help="also metadata.json and roofline.json (trusted use only)")
    show.add_argument("--json", action="store_true", help="print one JSON object")

    init = sub.add_parser("init", help="write a working three-file problem template to edit (docs/byo-problem.md)")
    init.add_argument("name", help="operator name: the folder's name, lower case letters, digits and _")
    init.add_argument(
        "--dir", type=Path, default=Path("."), help="folder to create NAME/ in (default: the current one)"
    )

    add = sub.add_parser("add", help="validate a problem folder and derive its hidden files")
    add.add_argument("path", type=Path, help="folder holding reference.py, input.py and shapes.json")
    add.add_argument("--into", type=Path, default=None, help="copy the problem into DIR/<name> first")
    add.add_argument(
        "--weight",
        type=_weight,
        default=1.0,
        help="importance weight in the aggregate score, relative to the other problems "
        "(default 1; 0 leaves the problem out of it)",
    )

    build = sub.add_parser("build", help="(re)build metadata.json, roofline.json and weights.json of the shipped set")
    build.add_argument(
        "--source", type=Path, default=None, help="the atrex-ops operator set (default: ../shared/atrex-ops)"
    )
    build.add_argument("ops", nargs="*", help="only these operators (default: all with a folder)")

    check = sub.add_parser("check", help="prove each problem rejects trivial candidates (finite, seed-sensitive, ...)")
    check.add_argument("ops", nargs="*", help="only these operators (default: all)")
    check.add_argument("--json", action="store_true", help="print the results as JSON")
    shared_options(parser, [lst, show, add, build, check], add_problems_option)
    parser.set_defaults(func=run)


def _weight(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _catalog(args: argparse.Namespace):
    from atrex_mcp.problemset.catalog import Catalog

    return Catalog(args.problems) if args.problems else Catalog()


def _list(args: argparse.Namespace) -> int:
    from atrex_mcp.commands.tables import plain_table, print_table

    catalog = _catalog(args)
    if catalog.missing_hidden():  # a set never built (a trace snapshot): the explicit derive step
        from atrex_mcp.problemset.derive import derive_missing

        derive_missing(catalog)
    weights = catalog.weights()
    rows = []
    for op in catalog.names():
        meta = catalog.hidden(op).metadata
        rows.append(
            ProblemSummary(
                name=op,
                num_shapes=len(catalog.visible(op).scored_shapes),
                weight=weights[op],
                dtype=meta["dtype"],
                phase=meta["phase"],
            )
        )
    if args.json:
        print(json.dumps([r.model_dump() for r in rows], indent=2))
        return 0
    table = plain_table(
        ["operator", "shapes", "weight", "dtype", "phase"], justify={"shapes": "right", "weight": "right"}
    )
    for r in rows:
        table.add_row(r.name, str(r.num_shapes), f"{r.weight:.4f}", r.dtype, r.phase)
    print_table(table)
    print(f"{len(rows)} operators, {sum(r.num_shapes for r in rows)} scored shapes")
    return 0


def _show(args: argparse.Namespace) -> int:
    catalog = _catalog(args)
    visible = catalog.visible(args.op)
    doc = {
        "name": visible.name,
        "shapes": json.loads(visible.shapes_json)["shapes"],
        "reference.py": visible.reference_source,
        "input.py": visible.input_source,
    }
    if args.hidden:
        if not catalog.has_hidden(args.op):  # the explicit derive step
            from atrex_mcp.problemset.derive import derive_missing

            derive_missing(catalog, [args.op])
        hidden = catalog.hidden(args.op)
        doc |= {"metadata": hidden.metadata, "roofline": hidden.roofline}
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"# {visible.name}: {len(visible.scored_shapes)} scored shapes + smoke '{visible.smoke_shape.id}'\n")
    print(f"## reference.py\n{visible.reference_source}\n## input.py\n{visible.input_source}\n## shapes")
    for s in visible.shapes:
        print(f"  {s.id:>6s}{' (smoke)' if s.smoke else ''}  init={json.dumps(s.init)}  inputs={json.dumps(s.inputs)}")
    if args.hidden:
        print(
            "\n## metadata.json\n"
            + json.dumps(doc["metadata"], indent=2)
            + "\n## roofline.json\n"
            + json.dumps(doc["roofline"], indent=2)
        )
    return 0


def _init(args: argparse.Namespace) -> int:
    from atrex_mcp.problemset.template import write_template

    target = write_template(args.name, args.dir)
    print(f"wrote {target}/reference.py, input.py and shapes.json")
    print(
        f"next: edit them, then  atrex-mcp problems add {target}  and  "
        f"atrex-mcp problems check --problems {target.parent} {target.name}"
    )
    return 0


def _add(args: argparse.Namespace) -> int:
    from atrex_mcp.problemset.derive import add_problem

    target = add_problem(args.path, args.into, weight=args.weight)
    print(f"added {target.name} (weight {args.weight:g}): hidden files derived in {target}")
    return 0


def _build(args: argparse.Namespace) -> int:
    from atrex_mcp.problemset.build import DEFAULT_SOURCE, build

    report = build(args.problems[0] if args.problems else None, args.source or DEFAULT_SOURCE, args.ops or None)
    print(f"built {len(report.built)}: {', '.join(report.built)}")
    for op in report.missing:
        print(f"missing folder: {op}")
    for line in report.warnings:
        print(f"warning: {line}")
    for op, message in report.errors.items():
        print(f"ERROR {op}: {message}", file=sys.stderr)
    return 0 if report.ok else 1


def _check(args: argparse.Namespace) -> int:
    from atrex_mcp.evaluate.problem_check import check_problems

    results = check_problems(_catalog(args), args.ops or None)
    if args.json:
        print(json.dumps([r.model_dump() | {"passed": r.passed} for r in results], indent=2))
    else:
        for r in results:
            print(f"{'PASS' if r.passed else 'FAIL'} {r.op} (shape {r.shape_id})")
            for c in r.checks:
                print(f"    {'ok  ' if c.passed else 'FAIL'} {c.name}: {c.detail}")
    return 0 if all(r.passed for r in results) else 1


def run(args: argparse.Namespace) -> int:
    actions = {"list": _list, "show": _show, "init": _init, "add": _add, "build": _build, "check": _check}
    return actions[args.problems_command](args)
