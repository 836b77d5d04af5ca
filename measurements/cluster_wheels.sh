#!/usr/bin/env bash
# Installs the cluster extra's wheels (Dask distributed and its dependencies, Python 3.12
# manylinux x86_64) from .whl/ into a folder of its own, for a GPU machine without a registry:
#   bash measurements/cluster_wheels.sh && export PYTHONPATH=/tmp/atrex-cluster-site:$PWD
# The wheels travel with the working tree (.whl is git-ignored: pass it in the run's carry).
# Made on a machine with a registry by:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 \
#     --abi none --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
#     -d .whl -r measurements/cluster_wheels.txt
set -euo pipefail
cd "$(dirname "$0")/.."
site="${ATREX_CLUSTER_SITE:-/tmp/atrex-cluster-site}"
if ! ls .whl/*.whl >/dev/null 2>&1; then
  echo "cluster_wheels: no wheels in .whl/ (carry .whl with the run, or pip install 'atrex-mcp[cluster]')" >&2
  exit 2
fi
python3 -m pip install --quiet --no-index --no-deps --target "$site" .whl/*.whl
PYTHONPATH="$site" python3 -c "import dask, distributed; print('cluster_wheels: dask', dask.__version__, 'distributed', distributed.__version__, 'in $site')"
