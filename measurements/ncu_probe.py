"""Which sandbox setting lets Nsight Compute profile the sandboxed worker, on this machine.

    python3 measurements/ncu_probe.py [--out measurements/results/ncu_probe/<date>_<gpu>.json] [--shape 2]

profile_kernel wraps the evaluator's sandbox worker in ncu. On the H200 ncu
captured kernels with Landlock off and crashed the worker (SIGSEGV in "Failed to profile") with
the worker's normal domain, with or without ncu's TCP ports and abstract unix sockets open. So
this probe layers openings on the normal domain until a capture succeeds, then drops each
opening of the working set in turn to find the ones needed: `channel` (ncu's TCP ports and
abstract unix sockets), `shm` (/dev/shm read-write), `tmp` (/tmp read-write), `dev` (/dev
read-write), `read_all` (/ readable, protected roots still left out), `write_all` (/ writable,
protected roots still left out). `landlock_off` runs too, as the control. Each variant's outcome
(kernels captured, or the error with ncu's last lines) is recorded; the minimal working set is
what `atrex_mcp.profiling.ncu.NCU_OPENINGS` should hold.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

from atrex_mcp.errors import AtrexError  # noqa: E402
from atrex_mcp.problemset.catalog import Catalog  # noqa: E402
from atrex_mcp.profiling import ncu as ncu_mod  # noqa: E402
from atrex_mcp.profiling.service import capture_counters  # noqa: E402
from measurements.bench_env import write_report  # noqa: E402
from sandbox import landlock  # noqa: E402

OPENINGS = {
    "channel": {"tcp_ports": ncu_mod.NCU_PORTS, "abstract_unix": True},
    "shm": {"paths": (("/dev/shm", landlock.READ_WRITE),)},
    "tmp": {"paths": (("/tmp", landlock.READ_WRITE),)},
    "dev": {"paths": (("/dev", landlock.READ_WRITE),)},
    "read_all": {"paths": (("/", landlock.READ_EXEC),)},
    "write_all": {"paths": (("/", landlock.READ_WRITE),)},
}
LAYERS = [
    ["channel"],
    ["channel", "shm"],
    ["channel", "shm", "tmp"],
    ["channel", "shm", "tmp", "dev"],
    ["channel", "shm", "tmp", "dev", "read_all"],
    ["channel", "write_all"],
]


def openings_of(names: list[str]) -> ncu_mod.SandboxOpenings:
    """The union of the named openings."""
    ports: tuple[int, ...] = ()
    abstract, paths = False, ()
    for name in names:
        part = OPENINGS[name]
        ports = ports or tuple(part.get("tcp_ports", ()))
        abstract = abstract or part.get("abstract_unix", False)
        paths += tuple(part.get("paths", ()))
    return ncu_mod.SandboxOpenings(tcp_ports=ports, abstract_unix=abstract, paths=paths)


EXAMPLE = ROOT / "examples" / "rms_norm_triton.py"
TRUSTED = (
    "import torch; x = torch.ones(1 << 20, device='cuda'); y = (x * 2).sum(); torch.cuda.synchronize(); print(float(y))"
)


def _variant(names: list[str] | None, shape: str, timeout_s: float) -> dict:
    """One capture: `names` are openings on the normal domain; None runs with Landlock off."""
    catalog = Catalog()
    source = EXAMPLE.read_text()
    label = "landlock_off" if names is None else "+".join(["strict", *names])
    saved = os.environ.get("ATREX_SANDBOX_LANDLOCK")
    if names is None:
        os.environ["ATREX_SANDBOX_LANDLOCK"] = "0"
    t0 = time.perf_counter()
    try:
        report = capture_counters(
            "rms_norm", source, shape, catalog, roofline=None, timeout_s=timeout_s, openings=openings_of(names or [])
        )
        return {
            "variant": label,
            "openings": names,
            "ok": True,
            "seconds": round(time.perf_counter() - t0, 1),
            "device": report.device,
            "kernels": [
                {
                    "name": k.name[:80],
                    "launches": k.launches,
                    "origin": k.origin,
                    "metrics": {m: round(v, 3) for m, v in k.metrics.items()},
                }
                for k in report.kernels
            ],
            "bottleneck": report.bottleneck.model_dump(mode="json"),
            "unavailable": report.unavailable_metrics,
            "sass": [f.model_dump(mode="json") for f in report.sass],
            "note": report.note,
        }
    except AtrexError as exc:
        return {
            "variant": label,
            "openings": names,
            "ok": False,
            "seconds": round(time.perf_counter() - t0, 1),
            "error": exc.info.model_dump(mode="json"),
        }
    finally:
        if saved is None:
            os.environ.pop("ATREX_SANDBOX_LANDLOCK", None)
        else:
            os.environ["ATREX_SANDBOX_LANDLOCK"] = saved


def probe(shape: str, timeout_s: float, record) -> list[str] | None:
    """Layer openings until one capture works, then drop each opening of that set while the
    capture still works; returns the minimal working set (None when none works)."""
    working = None
    for names in [[], *LAYERS]:
        if record(_variant(names, shape, timeout_s))["ok"]:
            working = names
            break
    if working is None:
        return None
    for name in list(working):
        trial = [n for n in working if n != name]
        if trial and record(_variant(trial, shape, timeout_s))["ok"]:  # [] (strict) already failed above
            working = trial
    return working


def _trusted_ncu(timeout_s: float) -> dict:
    tool = ncu_mod.ncu_executable()
    if tool is None:
        return {"variant": "trusted_script", "ok": False, "error": "ncu not found"}
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [tool, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", sys.executable, "-c", TRUSTED]
        done = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=timeout_s)
    return {
        "variant": "trusted_script",
        "ok": done.returncode == 0 and "gpu__time_duration" in done.stdout,
        "returncode": done.returncode,
        "output_tail": (done.stdout + done.stderr)[-2000:],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "measurements" / "results" / "ncu_probe_h200.json")
    parser.add_argument("--shape", default="2")
    parser.add_argument("--timeout-s", type=float, default=45.0)
    args = parser.parse_args(argv)
    import torch

    record: dict = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "ncu": ncu_mod.ncu_executable(),
        "shape": args.shape,
        "variants": [],
    }
    if record["gpu"] is None or record["ncu"] is None:
        record["skipped"] = "no GPU or no ncu: nothing to probe"
    else:

        def record_variant(outcome: dict) -> dict:
            record["variants"].append(outcome)
            print(json.dumps({k: outcome[k] for k in ("variant", "ok", "seconds")}), flush=True)
            return outcome

        record_variant(_variant(None, args.shape, args.timeout_s))
        record["minimal_openings"] = probe(args.shape, args.timeout_s, record_variant)
        if record["minimal_openings"] is None:
            record["variants"].append(_trusted_ncu(args.timeout_s))
    write_report(args.out, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
