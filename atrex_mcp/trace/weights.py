"""Importance weights from attributed device time (the paper's Eq. 2–3).

For application a and phase p, with T[a,p,i] the device time attributed to operator i and
T[a,p] all device time observed in that application and phase (mapped or not):

  Eq. 2   s[a,p,i] = T[a,p,i] / T[a,p]                         share within one app and phase
  Eq. 3   w[i]     = Σ_a c[a] · mean_{p ∈ P[a,i]} s[a,p,i]       P[a,i]: phases in which i ran in a

c[a] is application a's card-hour share (normalised over the applications that have traces).
Averaging over phases rather than pooling keeps a decode-heavy operator from being drowned by
long prefills; it is also why the raw weights can sum to more than 1 (the shipped ones sum to
1.09478). The snapshot's `weights` are w normalised over the operators it retains. The share of
device time that no rule claimed ("other") is aggregated the same way and reported, and so is the
share of operators that were mapped but not retained, pooled into one pseudo-operator (so that
it stays a fraction of device time, comparable with the unmapped share).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from atrex_mcp.errors import AtrexError
from atrex_mcp.trace.rules import OTHER

# times[app][phase][op] = attributed microseconds (op may be "other").
Times = dict[str, dict[str, dict[str, float]]]


@dataclass(frozen=True)
class Weights:
    """Eq. 3 before (`raw`) and after (`normalised`) normalisation, with the pieces behind them."""

    raw: dict[str, float]
    normalised: dict[str, float]
    shares: dict[str, dict[str, dict[str, float]]]  # Eq. 2 per app and phase, every op incl. other
    app_shares: dict[str, float]
    unmapped: float  # Eq. 3 applied to "other"
    excluded: float  # Eq. 3 applied to the mapped operators that were not retained, pooled as one


def phase_shares(times: Times) -> dict[str, dict[str, dict[str, float]]]:
    """Eq. 2: each operator's share of the device time of its app and phase."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for app, phases in times.items():
        for phase, per_op in phases.items():
            total = sum(per_op.values())
            if total > 0:
                out.setdefault(app, {})[phase] = {op: us / total for op, us in per_op.items()}
    return out


def _app_average(shares: dict[str, dict[str, float]], ops: set[str]) -> float:
    """Mean, over the phases in which any of `ops` ran, of their pooled share (0 when none ran)."""
    present = [sum(per_op.get(op, 0.0) for op in ops) for per_op in shares.values()]
    present = [share for share in present if share > 0]
    return sum(present) / len(present) if present else 0.0


def compute_weights(times: Times, app_shares: dict[str, float], retained: set[str]) -> Weights:
    shares = phase_shares(times)
    apps = {a: s for a, s in app_shares.items() if a in shares}
    total_share = sum(apps.values())
    if not apps or total_share <= 0:
        raise AtrexError(
            "input",
            "no_device_time",
            "The traces attribute no time to any application and phase.",
            "Check that the traces cover the model's forward steps.",
        )
    c = {a: s / total_share for a, s in apps.items()}
    ops = {op for per_app in shares.values() for per_op in per_app.values() for op in per_op}

    def eq3(pooled: set[str]) -> float:
        return sum(c[a] * _app_average(shares[a], pooled) for a in c)

    raw = {op: eq3({op}) for op in sorted(ops & retained)}
    raw_sum = sum(raw.values())
    normalised = {op: (w / raw_sum if raw_sum else 0.0) for op, w in raw.items()}
    return Weights(
        raw=raw,
        normalised=normalised,
        shares=shares,
        app_shares=c,
        unmapped=eq3({OTHER}),
        excluded=eq3(ops - retained - {OTHER}),
    )


def category_shares(times: Times, categories: Times, app_shares: dict[str, float]) -> dict[str, float]:
    """Eq. 3 of each kind of unmapped time, averaged over the phases in which anything was unmapped,
    so that the categories add up to the unmapped share. `categories[app][phase][category]` µs."""
    shares = phase_shares(times)
    apps = {a: s for a, s in app_shares.items() if a in shares}
    total_share = sum(apps.values()) or 1.0
    out: dict[str, float] = {}
    for app, c in apps.items():
        phases = [p for p, per_op in shares[app].items() if per_op.get(OTHER, 0.0) > 0]
        for phase in phases:
            total = sum(times[app][phase].values())
            for category, us in categories.get(app, {}).get(phase, {}).items():
                out[category] = out.get(category, 0.0) + (c / total_share) * (us / total) / len(phases)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml's safe loader, refusing a key given twice (plain yaml keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"application {key!r} is listed twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_app_shares(path: Path) -> dict[str, float]:
    """Card-hour shares per application: a YAML mapping `name: share` (# comments), or a JSON object."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise AtrexError("input", "bad_apps_file", f"Cannot read {path}: {reason}.") from exc
    hint = 'Write one `name: share` per line (e.g. `chat: 0.7`), or a JSON object {"chat": 0.7}.'
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise AtrexError("input", "bad_apps_file", f"{path}{where}: {problem}.", hint) from None
    if not isinstance(data, dict):
        raise AtrexError(
            "input", "bad_apps_file", f"{path}: expected `name: share` lines, got {type(data).__name__}.", hint
        )
    items = [(str(name), value) for name, value in data.items()]
    shares: dict[str, float] = {}
    for name, value in items:
        try:
            share = float(value)
        except (TypeError, ValueError):
            share = -1.0
        if not (share >= 0) or share == float("inf"):
            raise AtrexError(
                "input",
                "bad_apps_file",
                f"{path}: share of {name!r} must be a non-negative number, got {value!r}.",
                hint,
            )
        shares[name] = share
    if not shares or sum(shares.values()) <= 0:
        raise AtrexError("input", "bad_apps_file", f"{path}: no application with a positive share.", hint)
    return shares
