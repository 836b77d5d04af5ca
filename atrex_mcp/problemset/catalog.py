"""The problem catalog: the ONE place that separates what an agent may see from what only
the evaluator may read.

A problem is a folder `<root>/<op>/` with the five-file contract:
  visible: reference.py, input.py, shapes.json
  hidden:  metadata.json, roofline.json   (and the set-level weights.json)
`Catalog.visible()` never opens a hidden file; `Catalog.hidden()` is for trusted code only
(evaluator scoring, optimise-mode policy, reports). The catalog only reads, each file once per
catalog: a folder without hidden files (a trace snapshot, a problem never passed to `problems
add`) is refused by `hidden()` until the explicit derive step
(atrex_mcp.problemset.derive.derive_missing, called by the trusted entry points) has written them.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from atrex_mcp.errors import AtrexError, unknown_choice
from atrex_mcp.paths import problems_dir

if TYPE_CHECKING:
    import torch

VISIBLE_FILES = ("reference.py", "input.py", "shapes.json")
HIDDEN_FILES = ("metadata.json", "roofline.json")
WEIGHTS_FILE = "weights.json"


@dataclass(frozen=True)
class Shape:
    """One problem instance: the init parameters of Model and the generator's parameters."""

    id: str
    init: dict[str, Any]
    inputs: dict[str, Any]
    smoke: bool = False


@dataclass(frozen=True)
class VisibleProblem:
    """Everything an agent may see of a problem."""

    name: str
    reference_source: str
    input_source: str
    shapes_json: str
    shapes: tuple[Shape, ...]

    @property
    def scored_shapes(self) -> tuple[Shape, ...]:
        return tuple(s for s in self.shapes if not s.smoke)

    @property
    def smoke_shape(self) -> Shape:
        return next(s for s in self.shapes if s.smoke)

    def shape(self, shape_id: str) -> Shape:
        for s in self.shapes:
            if s.id == shape_id:
                return s
        raise unknown_choice("shape", shape_id, [s.id for s in self.shapes])


@dataclass(frozen=True)
class HiddenProblem:
    """Evaluator-only data: metadata (weights, production timings, provenance) and roofline."""

    name: str
    metadata: dict[str, Any]
    roofline: dict[str, Any]
    weight: float = field(default=0.0)

    def roofline_entry(self, shape_id: str) -> dict[str, Any] | None:
        """The shape's stored W/Q record (None for a shape without one, e.g. the smoke shape); its
        T_SOL comes from atrex_mcp.problemset.roofline.shape_roofline, not from this record."""
        return self.roofline.get("shapes", {}).get(shape_id)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise AtrexError(
            "input", "bad_problem_file", f"Cannot read {path.name} of problem {path.parent.name}: {exc}"
        ) from exc


def parse_shapes(data: dict[str, Any]) -> tuple[Shape, ...]:
    return tuple(
        Shape(
            id=str(s["id"]), init=dict(s.get("init") or {}), inputs=dict(s["inputs"]), smoke=bool(s.get("smoke", False))
        )
        for s in data["shapes"]
    )


def _import_file(path: Path, module_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


class Catalog:
    """Problems found under one or more roots; a later root's problem of the same name wins.

    A pure reader: every file is parsed once and the result kept (callers must not mutate what it
    returns); nothing here writes or runs a problem's code except the explicit loaders below."""

    def __init__(self, roots: list[Path] | Path | None = None):
        if roots is None:
            roots = [problems_dir()]
        elif isinstance(roots, Path | str):
            roots = [Path(roots)]
        self.roots = [Path(r).resolve() for r in roots]
        self._dirs: dict[str, Path] = {}
        self._visible: dict[str, VisibleProblem] = {}
        self._json: dict[tuple[str, str], Any] = {}
        for root in self.roots:
            if not root.is_dir():
                raise AtrexError("input", "bad_problem_root", f"Problem root {root} is not a directory.")
            for d in sorted(root.iterdir()):
                if d.is_dir() and all((d / f).is_file() for f in VISIBLE_FILES):
                    self._dirs[d.name] = d

    def names(self) -> list[str]:
        return sorted(self._dirs)

    def problem_dir(self, op: str) -> Path:
        """Trusted callers only: the folder holding the hidden files too."""
        try:
            return self._dirs[op]
        except KeyError:
            raise unknown_choice("problem", op, self.names()) from None

    def visible(self, op: str) -> VisibleProblem:
        if op not in self._visible:
            self._visible[op] = self._read_visible(op)
        return self._visible[op]

    def _read_visible(self, op: str) -> VisibleProblem:
        d = self.problem_dir(op)
        shapes_text = (d / "shapes.json").read_text()
        try:
            shapes = parse_shapes(json.loads(shapes_text))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise AtrexError("input", "bad_problem_file", f"shapes.json of {op} is malformed: {exc}") from exc
        return VisibleProblem(
            name=op,
            reference_source=(d / "reference.py").read_text(),
            input_source=(d / "input.py").read_text(),
            shapes_json=shapes_text,
            shapes=shapes,
        )

    def _hidden_json(self, op: str, name: str) -> Any:
        key = (op, name)
        if key not in self._json:
            self._json[key] = _read_json(self.problem_dir(op) / name)
        return self._json[key]

    def has_hidden(self, op: str) -> bool:
        """Whether the problem's hidden files exist (a problem without them needs the derive step)."""
        d = self.problem_dir(op)
        return all((d / f).is_file() for f in HIDDEN_FILES)

    def missing_hidden(self) -> list[str]:
        """Problems whose hidden files are not written yet."""
        return [op for op in self.names() if not self.has_hidden(op)]

    def hidden(self, op: str) -> HiddenProblem:
        if not self.has_hidden(op):
            raise AtrexError(
                "input",
                "hidden_files_missing",
                f"Problem {op} has no metadata.json/roofline.json yet.",
                "Derive them with `atrex-mcp problems add` on the problem's folder "
                "(serve, eval, score and bench do so for a set opened with --problems).",
            )
        return HiddenProblem(
            name=op,
            metadata=self._hidden_json(op, "metadata.json"),
            roofline=self._hidden_json(op, "roofline.json"),
            weight=self.weights().get(op, 0.0),
        )

    @cached_property
    def _weights(self) -> dict[str, float]:
        raw: dict[str, float] = {}
        for root in self.roots:
            if (root / WEIGHTS_FILE).is_file():
                raw.update(_read_json(root / WEIGHTS_FILE)["weights"])
        for op in self.names():
            if op not in raw:
                raw[op] = self._recorded_weight(op)
        total = sum(raw[op] for op in self.names())
        return {op: (raw[op] / total if total else 0.0) for op in self.names()}

    def _recorded_weight(self, op: str) -> float:
        """The weight `problems add --weight` recorded in the problem's metadata.json (0 without one)."""
        if not (self.problem_dir(op) / "metadata.json").is_file():
            return 0.0
        meta = self._hidden_json(op, "metadata.json")
        return float(meta.get("weight_raw", meta.get("weight", 0.0)) or 0.0)

    def weights(self) -> dict[str, float]:
        """Normalised importance weights over the operators in this catalog (sum 1; all 0 when no
        operator has a weight, and then no weighted aggregate exists)."""
        return dict(self._weights)

    # Trusted-side loaders: the reference and the input generator, imported from their files.
    def load_reference(self, op: str) -> type[torch.nn.Module]:
        return _import_file(self.problem_dir(op) / "reference.py", f"atrex_problem_{op}_reference").Model

    def load_make_inputs(self, op: str) -> Callable[..., dict[str, Any]]:
        return _import_file(self.problem_dir(op) / "input.py", f"atrex_problem_{op}_input").make_inputs
