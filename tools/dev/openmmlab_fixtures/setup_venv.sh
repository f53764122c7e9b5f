#!/usr/bin/env bash
# Make the reference environment for the OpenMMLab fixtures (MMSegmentation 1.2.2, MMDetection
# 3.3.0 on mmcv-lite), separate from densevit's: ./setup_venv.sh [VENV_DIR]  (default .venv-openmmlab)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${1:-$here/../../../.venv-openmmlab}
python3 -m venv "$venv"
"$venv/bin/pip" install -q torch==2.13.0
"$venv/bin/pip" install -q --no-deps -r "$here/requirements.txt"
echo "reference environment ready: $venv"
