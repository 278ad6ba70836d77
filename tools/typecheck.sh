#!/usr/bin/env bash
# Type-check the installed package layout: kernels/ and bridge/ install as hwsim.kernels and
# hwsim.bridge (pyproject's package-dir), which mypy cannot map from the repository folders, so it
# checks a tree of symlinks laid out by import name. Usage: tools/typecheck.sh [MYPY]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
mypy=${1:-$top/.venv/bin/mypy}
tree=$top/build/typecheck
rm -rf "$tree/hwsim" && mkdir -p "$tree/hwsim"
for entry in "$top"/hwsim/*; do ln -s "$entry" "$tree/hwsim/"; done
ln -s "$top/kernels" "$tree/hwsim/kernels"
ln -s "$top/bridge" "$tree/hwsim/bridge"
cd "$tree" && "$mypy" --config-file "$top/pyproject.toml" -p hwsim
