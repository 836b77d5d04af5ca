"""Can a script gate on `atrex-mcp eval` on a GPU host? Runs the command line as a user would and
checks its exit codes and output:

  correct kernel, default shapes  -> 0, every scored shape judged and timed, an estimate printed
                                     first (compared here with the real wall time)
  wrong result / runtime error    -> 1, the mismatch figures / the traceback under the user's file
  binary file, --seeds 0          -> 2, one `error:` line
  a shape larger than the GPU     -> 2, refused before any work, with its size

    # prints one line per check and a JSON summary; exit 1 on a failed check:
    python3 measurements/cli_gate_gpu.py
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "rms_norm_triton.py"
WRONG = (
    "import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n    def __init__(self, *, eps=1e-6):\n"
    "        super().__init__()\n\n    def forward(self, x, weight):\n        return (x * 2).to(x.dtype)\n"
)
RAISES = WRONG.replace("return (x * 2).to(x.dtype)", "raise ValueError('boom')")


def cli(*args: str) -> tuple[int, str, str, float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "atrex_mcp.cli", *args], cwd=ROOT, capture_output=True, text=True)
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="cli-gate-"))
    (tmp / "wrong.py").write_text(WRONG)
    (tmp / "raises.py").write_text(RAISES)
    (tmp / "binary.py").write_bytes(b"\x7fELF\x00\x01")
    checks: dict[str, bool] = {}
    summary: dict[str, object] = {}

    code, out, err, wall = cli("eval", str(EXAMPLE), "--op", "rms_norm", "--plain")
    estimate = re.search(r"on cuda: about (\d+):(\d+)", err)
    summary["correct_all_shapes"] = {
        "rc": code,
        "wall_s": round(wall, 1),
        "last_line": out.strip().splitlines()[-1],
        "estimate_s": int(estimate[1]) * 60 + int(estimate[2]) if estimate else None,
    }
    checks["correct kernel exits 0 with every shape passed"] = code == 0 and "56 passed, 0 failed" in out
    checks["an estimate is printed first"] = estimate is not None
    checks["progress lines carry an ETA"] = "[56/56] shape" in err and "ETA" in err

    code, out, _, _ = cli("eval", str(tmp / "wrong.py"), "--op", "rms_norm", "--shapes", "0,1", "--plain")
    checks["wrong result exits 1 with mismatch figures"] = (
        code == 1 and "max abs error" in out and "first bad index" in out
    )
    code, out, _, _ = cli("eval", str(tmp / "raises.py"), "--op", "rms_norm", "--shapes", "0", "--plain")
    checks["runtime error exits 1 naming the user's file"] = (
        code == 1 and f'File "{tmp / "raises.py"}"' in out and "candidate.py" not in out
    )
    code, _, err, _ = cli("eval", str(tmp / "binary.py"), "--op", "rms_norm")
    checks["binary file exits 2 in one line"] = code == 2 and err.count("\n") == 1 and err.startswith("error: ")
    code, _, err, _ = cli("eval", str(EXAMPLE), "--op", "rms_norm", "--seeds", "0")
    checks["--seeds 0 exits 2 in one line"] = code == 2 and err.count("\n") == 1

    code, _, _, _ = cli("problems", "init", "big_op", "--dir", str(tmp))
    shapes_file = tmp / "big_op" / "shapes.json"
    doc = json.loads(shapes_file.read_text())
    doc["shapes"].append({"id": "huge", "init": {"scale": 1.0}, "inputs": {"tokens": 10**8, "hidden": 2048}})
    shapes_file.write_text(json.dumps(doc))
    code, _, err, wall = cli("eval", str(EXAMPLE), "--op", "big_op", "--problems", str(tmp), "--shapes", "huge")
    summary["too_large"] = err.strip()
    checks["a shape larger than the GPU is refused (exit 2)"] = (
        code == 2 and "shape_too_large" in err and "cuda:0" in err
    )

    for name, ok in checks.items():
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
    print(json.dumps(summary, indent=1))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
