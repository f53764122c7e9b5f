#!/usr/bin/env bash
# Write every OpenMMLab fixture into tests/checkpoint/fixtures/ with the reference environment:
#   tools/dev/openmmlab_fixtures/make_all.sh [VENV_DIR]   (default .venv-openmmlab; see setup_venv.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
venv=${1:-$root/.venv-openmmlab}
cd "$root"
for script in tools/dev/openmmlab_fixtures/make_*.py; do
    echo "== $script"
    PYTHONPATH="$root:$root/tools/dev/openmmlab_fixtures" "$venv/bin/python" "$script"
done
du -ch tests/checkpoint/fixtures/* | tail -1
