"""Writing a BenchReport: report.md (figures as PNG files beside it), report.html (one
self-contained file, figures embedded as base64 PNG), report.json (the data).

Both documents come from one list of blocks (headings, tables, lists, figures), rendered by the
jinja2 templates in atrex_mcp/templates/report/, so the markdown and the HTML always say the same thing.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from atrex_mcp.agentbench.figures import FIGURES, draw_all
from atrex_mcp.agentbench.report import BenchReport, MainRow, RunReport

NA = "n/a"


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Paragraph:
    text: str


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass
class Bullets:
    items: list[str]


@dataclass
class Figure:
    file: str
    caption: str


Block = Heading | Paragraph | Table | Bullets | Figure


def _pct(value: float | None) -> str:
    return NA if value is None else f"{value:.0%}"


def _num(value: float | None, digits: int = 3) -> str:
    return NA if value is None else f"{value:.{digits}f}"


def _ratio(value: float | None) -> str:
    return NA if value is None else f"{value:.2f}×"


def _count(value: int | None) -> str:
    return NA if value is None else f"{value:,}"


def _main_row(row: MainRow) -> list[str]:
    return [
        row.run,
        row.agent,
        row.condition or "—",
        row.knowledge or "—",
        row.model or "default",
        str(row.operators),
        str(row.submitted),
        _pct(row.compile_rate),
        _pct(row.correctness),
        _pct(row.fully_correct),
        _pct(row.dsl_adoption),
        _num(row.s, 4),
        _num(row.s_agg, 4),
        _ratio(row.vs_torch_compile),
        _ratio(row.vs_eager),
    ]


def _operator_table(run: RunReport) -> Table:
    headers = [
        "operator",
        "weight",
        "regime",
        "agent",
        "agent time",
        "tokens in / out",
        "compiled",
        "correct",
        "DSL share",
        "S_i",
        "vs torch.compile",
        "vs eager",
        "stopped at",
    ]
    rows = []
    for line in run.operators:
        tokens = (
            NA
            if line.input_tokens is None and line.output_tokens is None
            else f"{_count(line.input_tokens)} / {_count(line.output_tokens)}"
        )
        agent = line.agent + (" (budget reached)" if line.timed_out else "")
        correct = NA if line.shapes is None else f"{line.correct}/{line.shapes}"
        score = _num(line.score, 4) + (f" ({line.faster_than_sol} shape(s) S>1)" if line.faster_than_sol else "")
        rows.append(
            [
                line.op,
                _num(line.weight, 4),
                line.regime or NA,
                agent,
                NA if line.elapsed_s is None else f"{line.elapsed_s:.0f} s",
                tokens,
                NA if line.compiled is None else ("yes" if line.compiled else "no"),
                correct,
                _num(line.dsl_share, 2),
                score,
                _ratio(line.vs_torch_compile),
                _ratio(line.vs_eager),
                line.failure or "—",
            ]
        )
    return Table(headers, rows)


def blocks(report: BenchReport) -> list[Block]:
    out: list[Block] = [
        Heading(report.title, 1),
        Paragraph(
            f"Generated {report.generated_at}. Every S is computed against the `{report.hardware}` hardware profile."
        ),
        Heading("Main table"),
    ]
    rows = [_main_row(r.row) for r in report.runs] + [_main_row(b) for b in report.baselines]
    out.append(
        Table(
            [
                "run",
                "agent",
                "condition",
                "knowledge",
                "model",
                "operators",
                "submitted",
                "compile rate",
                "correctness",
                "fully correct",
                "DSL adoption",
                "S",
                "S_agg",
                "vs torch.compile",
                "vs eager",
            ],
            rows,
        )
    )
    notes = [f"{r.row.run}: {note}" for r in report.runs for note in r.row.notes]
    if notes:
        out.append(Bullets(notes))

    out.append(Heading("Failure taxonomy"))
    names = [r.row.run for r in report.runs]
    if report.failures:
        out.append(
            Paragraph(
                "Where each operator stopped (operators), and every failed evaluated shape by stage/category (shapes)."
            )
        )
        headers = ["stopped at"] + [f"{n}: {what}" for n in names for what in ("operators", "shapes")]
        out.append(
            Table(
                headers,
                [
                    [f.failure] + [str(getattr(f, what).get(n, 0)) for n in names for what in ("operators", "shapes")]
                    for f in report.failures
                ],
            )
        )
    else:
        out.append(
            Paragraph("No failures: every operator of every run was submitted and correct on every evaluated shape.")
        )

    for run in report.runs:
        out.append(Heading(f"Per operator: {run.row.run}"))
        facts = [
            f"run directory: `{run.run_dir}`",
            f"evaluated shapes: {run.evaluated_shapes or 'not evaluated'}",
            f"evaluated on: {run.device or 'not evaluated'}",
        ]
        facts += [f"isolation warning: {w}" for w in run.isolation_warnings]
        out.append(Bullets(facts))
        out.append(_operator_table(run))

    out.append(Heading("Figures"))
    out += [Figure(name, caption) for name, caption in FIGURES.items()]
    out.append(Heading("Definitions"))
    out.append(Bullets(report.notes))
    return out


# ------------------------------------------------------------------ templates
def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _inline(text: str) -> Markup:
    """Escape, then render `code` spans."""
    parts = html.escape(text).split("`")
    return Markup("".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts)))


def _environment(figure_dir: Path | None = None) -> Environment:
    """The report templates (package data), with a test per block kind and the filters they use."""
    env = Environment(
        loader=PackageLoader("atrex_mcp", "templates/report"),
        autoescape=select_autoescape(["html.j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=StrictUndefined,
    )
    for kind in (Heading, Paragraph, Table, Bullets, Figure):
        env.tests[kind.__name__.lower()] = lambda item, kind=kind: isinstance(item, kind)

    def png_base64(name: str) -> str:
        if figure_dir is None:
            raise ValueError("a report with figures renders to HTML with a figure directory")
        return base64.b64encode((Path(figure_dir) / name).read_bytes()).decode()

    env.filters |= {
        "md_cell": _md_cell,
        "inline": _inline,
        "esc": lambda text: Markup(html.escape(text)),
        "png_base64": png_base64,
    }
    return env


def to_markdown(items: list[Block]) -> str:
    return _environment().get_template("report.md.j2").render(items=items)


def to_html(items: list[Block], figure_dir: Path, title: str) -> str:
    return _environment(figure_dir).get_template("report.html.j2").render(items=items, title=title, na=NA)


def write_report(report: BenchReport, out_dir: Path) -> list[Path]:
    """Figures, report.md, report.html and report.json into `out_dir`; returns the paths."""
    out_dir = Path(out_dir)
    figures = draw_all(report, out_dir)
    items = blocks(report)
    written = {
        "report.md": to_markdown(items),
        "report.html": to_html(items, out_dir, report.title),
        "report.json": report.model_dump_json(indent=1),
    }
    for name, text in written.items():
        (out_dir / name).write_text(text)
    return [out_dir / name for name in written] + list(figures.values())
