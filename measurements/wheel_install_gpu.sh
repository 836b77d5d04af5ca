#!/usr/bin/env bash
# Does a wheel install (not editable) evaluate a kernel on this GPU host, as root, with every
# sandbox layer? Installs a wheel built elsewhere into a fresh venv that sees the system's torch,
# Triton and MCP SDK, checks that `import atrex_mcp` resolves to the wheel, then runs from outside
# the checkout: `eval` of the example kernel at its smoke shape, `doctor`, and the wheel/checkout
# install tests (eval and a real stdio client's validate, each through the wheel and the checkout).
#
#   pip wheel --no-deps . -w .whl                     # where a package index is reachable
#   bash measurements/wheel_install_gpu.sh .whl/atrex_mcp-*.whl OUT_DIR
#
# Confirms it: eval exits 0 with the smoke shape correct, isolation.pid_namespace and
# mount_namespace true (uid 65534 where the interpreter is readable by other users), doctor's
# worker line ok or warn, and the tests pass.
set -uo pipefail
# ATREX_DEPS_SITE: a folder of dependencies this host lacks (installed with pip --target), seen by
# the venv through PYTHONPATH; the checkout itself is never on that path.
deps=${ATREX_DEPS_SITE:-}
run_venv() { if [ -n "$deps" ]; then env PYTHONPATH="$deps" "$@"; else env -u PYTHONPATH "$@"; fi; }
wheel=$(realpath "$1")
out=$(realpath -m "${2:-wheel_install_out}")
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=$(mktemp -d /tmp/atrex-wheel-venv.XXXXXX)
mkdir -p "$out"
echo "uid $(id -u), python $(python3 --version 2>&1), wheel $wheel"
python3 -m venv --without-pip --system-site-packages "$venv" \
    && python3 -m pip --python "$venv/bin/python" install -q --no-deps --no-index "$wheel" || exit 1
cd /tmp
run_venv "$venv/bin/python" -c 'import atrex_mcp, sandbox; print("from", atrex_mcp.__file__, sandbox.__file__)'
run_venv "$venv/bin/atrex-mcp" eval "$repo/examples/rms_norm_triton.py" --op rms_norm --shapes smoke \
    --seeds 1 --json \
    > "$out/wheel_eval.json" 2> "$out/wheel_eval.stderr"
echo "eval exit $?"
python3 - "$out/wheel_eval.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
if "error" in r:
    sys.exit(f"eval error: {r['error']}")
iso = r["isolation"]
shapes = [(s["id"], s["correct"], s.get("time_ms")) for s in r["shapes"]]
print("compiled", r["compiled"], "shapes", shapes, "device", r["device"]["name"])
print("isolation: uid", iso["uid"], "pid_ns", iso["pid_namespace"], "mount_ns", iso["mount_namespace"],
      "landlock", iso["landlock_abi"], iso["landlock_enforced"], "warnings", iso["warnings"])
EOF
run_venv "$venv/bin/atrex-mcp" doctor --json > "$out/doctor.json"
echo "doctor exit $?"
run_venv "$venv/bin/atrex-mcp" doctor --no-probe | tee "$out/doctor.txt"
cd "$repo" && ATREX_TEST_WHEEL="$wheel" timeout 900 python3 -m pytest -q -p no:cacheprovider \
    tests/test_install_wheel.py tests/test_sandbox_hidden_dirs.py 2>&1 | tail -15 | tee "$out/pytest.txt"
rm -rf "$venv"
