#!/usr/bin/env bash
# The newest end of the supported range: a fresh virtual environment on Python 3.13 with the
# newest JAX (and flax, optax, ...) that setup.cfg allows there, then the fast tier of the
# tests with the `costly` checks (whole updates against their oracles, processes). `.ci/run`
# runs it after the Python 3.11 leg; run it by hand the same way:
#
#     .ci/newest.sh                         # Python 3.13 from pyenv
#     PYTHON=/path/to/python3.13 .ci/newest.sh
#
# The environment is made in a temporary directory and removed at exit; NEWEST_VENV=DIR
# makes (or reuses) it at DIR instead. Exits non-zero when the install or a test fails.
set -euo pipefail
cd "$(dirname "$0")/.."

python="${PYTHON:-}"
pyenv="$(command -v pyenv || true)"
if [ -z "$pyenv" ] && [ -x "${PYENV_ROOT:-$HOME/.pyenv}/bin/pyenv" ]; then
    pyenv="${PYENV_ROOT:-$HOME/.pyenv}/bin/pyenv"  # installed, not on PATH
fi
if [ -z "$python" ] && [ -n "$pyenv" ]; then
    # the newest 3.13.x that pyenv has
    python="$(ls -d "$("$pyenv" root)"/versions/3.13.*/bin/python 2>/dev/null | sort -V | tail -n 1 || true)"
    if [ -z "$python" ]; then
        echo "newest.sh: pyenv has no Python 3.13 (pyenv install 3.13, or set PYTHON)" >&2
        exit 1
    fi
fi
if [ -z "$python" ]; then
    python="$(command -v python3.13 || true)"
fi
if [ -z "$python" ]; then
    echo "newest.sh: no Python 3.13 here (neither pyenv nor python3.13 on PATH; set PYTHON): skipping the newest-JAX leg" >&2
    exit 0
fi

venv="${NEWEST_VENV:-}"
if [ -z "$venv" ]; then
    scratch="$(mktemp -d)"
    trap 'rm -rf "$scratch"' EXIT
    venv="$scratch/venv"
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
echo "newest.sh: $("$venv/bin/python" --version) in $venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet --upgrade -e ".[test]"
"$venv/bin/python" -m pip list 2>/dev/null | grep -E -i '^(jax|jaxlib|flax|optax|orbax-checkpoint|chex|gymnax|flashbax|mctx|envpool|numpy) '
"$venv/bin/python" -m pytest -m "not slow or costly"
