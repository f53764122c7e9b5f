#!/usr/bin/env bash
# Training on a SLURM cluster: srun starts one task per GPU, each with --launcher slurm.
#   [GPUS=8] [GPUS_PER_NODE=8] [CPUS_PER_TASK=5] [SRUN_ARGS=...] \
#   tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [train.py args...]
set -euo pipefail
if [ $# -lt 4 ]; then
    echo "usage: $0 PARTITION JOB_NAME CONFIG WORK_DIR [train.py arguments...]" >&2
    exit 2
fi
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
WORK_DIR=$4
shift 4
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-$(( GPUS < 8 ? GPUS : 8 ))}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
SRUN_ARGS=${SRUN_ARGS:-}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

# SRUN_ARGS is split into words on purpose (e.g. SRUN_ARGS="--quotatype=auto -x node3")
# shellcheck disable=SC2086
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" \
exec srun -p "$PARTITION" --job-name="$JOB_NAME" \
    --gres=gpu:"$GPUS_PER_NODE" --ntasks="$GPUS" --ntasks-per-node="$GPUS_PER_NODE" \
    --cpus-per-task="$CPUS_PER_TASK" --kill-on-bad-exit=1 $SRUN_ARGS \
    "${PYTHON:-python}" -u "$ROOT/tools/train.py" "$CONFIG" --work-dir "$WORK_DIR" \
    --launcher slurm "$@"
