#!/usr/bin/env bash
# Distributed training with torchrun: one process per GPU (or per CPU worker).
#   tools/dist_train.sh CONFIG GPUS [train.py args...]
# Several machines: run on each with the same MASTER_ADDR / PORT and NNODES, and
# NODE_RANK = 0..NNODES-1. Backend: NCCL on GPUs; gloo on CPU (densevit/engine/launch.py).
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 CONFIG GPUS [train.py arguments...]" >&2
    exit 2
fi
CONFIG=$1
GPUS=$2
shift 2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" \
exec "${PYTHON:-python}" -m torch.distributed.run \
    --nnodes="$NNODES" --node_rank="$NODE_RANK" --nproc_per_node="$GPUS" \
    --master_addr="$MASTER_ADDR" --master_port="$PORT" \
    "$ROOT/tools/train.py" "$CONFIG" --launcher pytorch "$@"
