#!/usr/bin/env bash
# The GPU benchmark on a bare machine with one NVIDIA GPU, unattended:
#
#   bash experiments/benchmarks/gpu.sh [OUT.json]      (from the repository root)
#
# Installs podracer with EnvPool (and Brax, if it installs) and JAX's CUDA 12 plugin for
# the JAX version setup.cfg pins, unless JAX already sees a GPU; then runs
# `podracer bench gpu --out OUT` (default experiments/benchmarks/results/gpu-<host>-<UTC time>.json).
# Each part of the benchmark has its own time budget (8 minutes in all on one H100) and a
# part that fails is recorded in the file, not fatal. Offline: set WHEELHOUSE=DIR to
# install from wheels in DIR only (pip --no-index --find-links DIR).
set -uo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python3}"
OUT="${1:-experiments/benchmarks/results/gpu-$(hostname)-$(date -u +%Y%m%dT%H%M%SZ).json}"
PIP=("$PYTHON" -m pip install -q)
if [ -n "${WHEELHOUSE:-}" ]; then
  PIP+=(--no-index --find-links "$WHEELHOUSE")
fi

has_gpu() {
  "$PYTHON" - <<'PY' 2>/dev/null
import jax, sys
sys.exit(0 if jax.default_backend() == "gpu" else 1)
PY
}

if ! "$PYTHON" -c "import podracer, envpool" 2>/dev/null || ! has_gpu; then
  # setup.cfg pins jax>=0.10.2,<0.11; its CUDA 12 extra brings the matching plugin and CUDA wheels.
  JAX_VERSION=$("$PYTHON" -c "import jax; print(jax.__version__)" 2>/dev/null || echo 0.10.2)
  "${PIP[@]}" -e '.[envpool]' "jax[cuda12]==${JAX_VERSION}" || echo "gpu.sh: install failed; running with what is here" >&2
fi
"${PIP[@]}" -e '.[brax]' 2>/dev/null || echo "gpu.sh: brax did not install; its part is skipped with the reason" >&2
if ! has_gpu; then
  echo "gpu.sh: JAX sees no GPU (backend $("$PYTHON" -c 'import jax; print(jax.default_backend())' 2>/dev/null)); the records will say so" >&2
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
mkdir -p "$(dirname "$OUT")"
exec "$PYTHON" -m podracer bench gpu --out "$OUT"
