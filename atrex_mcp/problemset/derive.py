"""A user's own problem: validate its three visible files and derive the hidden ones.

`validate_problem(dir)` checks the five-file contract's visible half (docs/DESIGN.md): a Model
class, make_inputs(*, seed, device=..., **shape inputs), a shapes.json with scored shapes and one
smoke shape, input keys equal to forward's parameters, deterministic inputs, and a reference
that runs at the smoke shape. `derive_hidden(dir)` counts W/Q of every scored shape with the
dispatch-level counter (atrex_mcp.problemset.flop_counter) and writes metadata.json and roofline.json.
`derive_missing(catalog)` is the explicit derive step of a problem set opened for trusted use (a
trace snapshot, a folder never passed to `problems add`): the catalog itself never writes.
"""

from __future__ import annotations

import inspect
import shutil
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from atrex_mcp.errors import AtrexError
from atrex_mcp.problemset.catalog import VISIBLE_FILES, Catalog
from atrex_mcp.problemset.files import describe_output, roofline_document, run_reference, write_json
from atrex_mcp.problemset.flop_counter import count_problem
from atrex_mcp.problemset.hardware import DtypePath
from atrex_mcp.problemset.roofline import Workload

COUNTING = (
    "dispatch-level counter, SPEC §0.5 rules (atrex_mcp.problemset.flop_counter; conventions in docs/roofline.md)"
)


def _invalid(problem_dir: Path, message: str, hint: str = "") -> AtrexError:
    return AtrexError(
        "input",
        "invalid_problem",
        f"Problem {problem_dir.name}: {message}",
        hint or "See docs/DESIGN.md, 'Problem files', for the contract of reference.py, input.py and shapes.json.",
    )


def _catalog_of(problem_dir: Path) -> Catalog:
    missing = [f for f in VISIBLE_FILES if not (problem_dir / f).is_file()]
    if missing:
        raise _invalid(problem_dir, f"missing {', '.join(missing)}.")
    return Catalog(problem_dir.parent)


def _forward_params(problem_dir: Path, model_cls: type[Any]) -> list[str]:
    params = list(inspect.signature(model_cls.forward).parameters.values())[1:]
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        raise _invalid(problem_dir, "Model.forward must name its inputs (no *args/**kwargs).")
    return [p.name for p in params]


def _check_signatures(problem_dir: Path, model_cls: type[Any], make_inputs: Any, shapes: tuple) -> None:
    sig = inspect.signature(make_inputs)
    params = sig.parameters
    if "seed" not in params or params["seed"].kind not in (
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise _invalid(problem_dir, "make_inputs must take a keyword argument `seed`.")
    if "device" not in params or params["device"].default is inspect.Parameter.empty:
        raise _invalid(problem_dir, 'make_inputs must take `device` with a default ("cpu").')
    for shape in shapes:
        try:
            sig.bind(seed=0, device="cpu", **shape.inputs)
        except TypeError as exc:
            raise _invalid(problem_dir, f"shape {shape.id}: its inputs do not fit make_inputs: {exc}.") from None
        try:
            inspect.signature(model_cls.__init__).bind(None, **shape.init)
        except TypeError as exc:
            raise _invalid(problem_dir, f"shape {shape.id}: its init does not fit Model.__init__: {exc}.") from None


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)


def validate_problem(problem_dir: Path) -> Catalog:
    """Raise an AtrexError naming the first contract violation; return a catalog holding the problem."""
    problem_dir = Path(problem_dir).resolve()
    catalog = _catalog_of(problem_dir)
    op = problem_dir.name
    try:
        visible = catalog.visible(op)
        model_cls = catalog.load_reference(op)
        make_inputs = catalog.load_make_inputs(op)
    except AtrexError:
        raise
    except Exception as exc:  # an import error of the user's files is the answer
        raise _invalid(problem_dir, f"cannot load reference.py/input.py: {type(exc).__name__}: {exc}.") from exc
    if not (isinstance(model_cls, type) and issubclass(model_cls, torch.nn.Module)):
        raise _invalid(problem_dir, "reference.py must define `class Model(nn.Module)`.")
    if not visible.scored_shapes:
        raise _invalid(problem_dir, "shapes.json has no scored shape.")
    smoke = [s for s in visible.shapes if s.smoke]
    if len(smoke) != 1:
        raise _invalid(
            problem_dir, f'shapes.json must hold exactly one smoke shape ("smoke": true), found {len(smoke)}.'
        )
    ids = [s.id for s in visible.shapes]
    if len(set(ids)) != len(ids):
        raise _invalid(problem_dir, f"shape ids repeat: {sorted(i for i, n in Counter(ids).items() if n > 1)}.")
    _check_signatures(problem_dir, model_cls, make_inputs, visible.shapes)
    first = make_inputs(seed=0, device="cpu", **smoke[0].inputs)
    if not isinstance(first, dict) or not all(isinstance(v, torch.Tensor) for v in first.values()):
        raise _invalid(problem_dir, "make_inputs must return a dict of tensors.")
    forward = _forward_params(problem_dir, model_cls)
    if sorted(first) != sorted(forward):
        raise _invalid(
            problem_dir, f"make_inputs keys {sorted(first)} differ from forward's parameters {sorted(forward)}."
        )
    if not _same(first, make_inputs(seed=0, device="cpu", **smoke[0].inputs)):
        raise _invalid(
            problem_dir,
            "make_inputs is not deterministic for a seed.",
            "Draw from a local torch.Generator(device=device).manual_seed(seed), never the global RNG.",
        )
    try:
        describe_output(run_reference(catalog, op, smoke[0]))
    except Exception as exc:  # the reference's own failure is the answer
        raise _invalid(problem_dir, f"the reference fails at the smoke shape: {type(exc).__name__}: {exc}.") from exc
    return catalog


def derive_hidden(
    problem_dir: Path,
    *,
    weight: float = 0.0,
    phase: str = "unknown",
    tensors: str = "auto",
    catalog: Catalog | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Count every scored shape and write metadata.json and roofline.json next to the visible files."""
    problem_dir = Path(problem_dir).resolve()
    catalog = catalog or _catalog_of(problem_dir)
    op = problem_dir.name
    visible = catalog.visible(op)
    model_cls, make_inputs = catalog.load_reference(op), catalog.load_make_inputs(op)
    workloads: dict[str, Workload] = {}
    extra: dict[str, dict[str, Any]] = {}
    labels: Counter[DtypePath] = Counter()
    for shape in visible.scored_shapes:
        result = count_problem(model_cls, make_inputs, shape.init, shape.inputs, tensors=tensors)
        workloads[shape.id] = result.labelled()
        labels[result.storage_path] += 1
        extra[shape.id] = {"counted_on": f"{result.tensors} tensors", "flops_by_op": result.by_op}
    metadata = {
        "op": op,
        "dtype": labels.most_common(1)[0][0],
        "phase": phase,
        "weight_raw": weight,
        "weight": weight,
        "output": describe_output(run_reference(catalog, op, visible.smoke_shape)),
        "shapes": {s.id: {"description": "", "production_us": {}} for s in visible.scored_shapes},
        "production_note": "A user problem: no production timings.",
        "deviations": [],
    }
    roofline = roofline_document(op, COUNTING, workloads, extra=extra)
    write_json(problem_dir / "metadata.json", metadata)
    write_json(problem_dir / "roofline.json", roofline)
    return metadata, roofline


def add_problem(path: Path, into: Path | None = None, *, weight: float = 0.0) -> Path:
    """Validate a problem folder, copy its visible files into `into`/<name> when given, derive the hidden files."""
    source = Path(path).resolve()
    validate_problem(source)
    target = source if into is None else Path(into).resolve() / source.name
    if target != source:
        if target.exists():
            raise AtrexError(
                "input", "problem_exists", f"{target} already exists.", "Remove it or choose another --into."
            )
        target.mkdir(parents=True)
        for name in VISIBLE_FILES:
            shutil.copy2(source / name, target / name)
    derive_hidden(target, weight=weight)
    return target


def derive_missing(catalog: Catalog, ops: Iterable[str] | None = None) -> list[str]:
    """Derive the hidden files of each (or each named) problem that has only its visible files;
    the names derived. Called once where a trusted command opens a problem set (serve, eval, score,
    roofline, problems list/show, bench), before the first read of a hidden file."""
    derived = []
    for op in catalog.names() if ops is None else list(ops):
        if catalog.has_hidden(op):
            continue
        try:
            derive_hidden(catalog.problem_dir(op), catalog=catalog)
        except AtrexError:
            raise
        except Exception as exc:  # the user's reference failing to count is the answer
            raise AtrexError(
                "input",
                "derive_failed",
                f"Deriving the hidden files of problem {op} failed: {type(exc).__name__}: {exc}",
                f"Run `atrex-mcp problems add {catalog.problem_dir(op)}` to validate it and see what breaks.",
            ) from exc
        derived.append(op)
    return derived
