"""Which sandbox setting lets Nsight Compute profile the sandboxed worker, on this machine.

    python3 bench/ncu_probe.py [--out bench/results/ncu_probe_h200.json] [--shape 2]

profile_kernel wraps the evaluator's sandbox worker in ncu. The worker enters its Landlock
domain after CUDA initialisation; whether ncu's injected library still needs new TCP
connections or abstract unix sockets after that is what this settles. Variants, in order, until
one captures kernels: `strict` (the worker's normal domain), `open_channel` (ncu's TCP ports and
abstract unix sockets left open), `landlock_off` (ATREX_SANDBOX_LANDLOCK=0: uid, namespaces and
rlimits only). When none does, ncu runs once on a trusted script outside any sandbox, to tell a
sandbox problem from an ncu problem. Every variant's outcome (kernels captured, or the error
with ncu's last lines) is recorded.
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
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from atrex_mcp.catalog import Catalog  # noqa: E402
from atrex_mcp.errors import AtrexError  # noqa: E402
from atrex_mcp.profiling import ncu as ncu_mod  # noqa: E402
from atrex_mcp.profiling.service import capture_counters  # noqa: E402

EXAMPLE = ROOT / "examples" / "rms_norm_triton.py"
TRUSTED = "import torch; x = torch.ones(1 << 20, device='cuda'); y = (x * 2).sum(); torch.cuda.synchronize(); print(float(y))"


def _variant(name: str, shape: str, timeout_s: float) -> dict:
    catalog = Catalog()
    source = EXAMPLE.read_text()
    open_channel = name == "open_channel"
    saved = os.environ.get("ATREX_SANDBOX_LANDLOCK")
    if name == "landlock_off":
        os.environ["ATREX_SANDBOX_LANDLOCK"] = "0"
    t0 = time.perf_counter()
    try:
        report = capture_counters("rms_norm", source, shape, catalog, roofline=None, timeout_s=timeout_s,
                                  open_channel=open_channel)
        return {"variant": name, "ok": True, "seconds": round(time.perf_counter() - t0, 1), "device": report.device,
                "kernels": [{"name": k.name[:80], "launches": k.launches, "origin": k.origin,
                             "metrics": {m: round(v, 3) for m, v in k.metrics.items()}} for k in report.kernels],
                "bottleneck": report.bottleneck.model_dump(mode="json"), "unavailable": report.unavailable_metrics,
                "sass": [f.model_dump(mode="json") for f in report.sass], "note": report.note}
    except AtrexError as exc:
        return {"variant": name, "ok": False, "seconds": round(time.perf_counter() - t0, 1),
                "error": exc.info.model_dump(mode="json")}
    finally:
        if saved is None:
            os.environ.pop("ATREX_SANDBOX_LANDLOCK", None)
        else:
            os.environ["ATREX_SANDBOX_LANDLOCK"] = saved


def _trusted_ncu(timeout_s: float) -> dict:
    tool = ncu_mod.ncu_executable()
    if tool is None:
        return {"variant": "trusted_script", "ok": False, "error": "ncu not found"}
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [tool, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", sys.executable, "-c", TRUSTED]
        done = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=timeout_s)
    return {"variant": "trusted_script", "ok": done.returncode == 0 and "gpu__time_duration" in done.stdout,
            "returncode": done.returncode, "output_tail": (done.stdout + done.stderr)[-2000:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "ncu_probe_h200.json")
    parser.add_argument("--shape", default="2")
    parser.add_argument("--timeout-s", type=float, default=45.0)
    args = parser.parse_args(argv)
    import torch

    record: dict = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "python": platform.python_version(),
                    "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                    "ncu": ncu_mod.ncu_executable(), "shape": args.shape, "variants": []}
    if record["gpu"] is None or record["ncu"] is None:
        record["skipped"] = "no GPU or no ncu: nothing to probe"
    else:
        for name in ("strict", "open_channel", "landlock_off"):
            outcome = _variant(name, args.shape, args.timeout_s)
            record["variants"].append(outcome)
            print(json.dumps({k: outcome[k] for k in ("variant", "ok", "seconds")}), flush=True)
            if outcome["ok"]:
                break
        else:
            record["variants"].append(_trusted_ncu(args.timeout_s))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
