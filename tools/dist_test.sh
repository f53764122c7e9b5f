#!/usr/bin/env bash
# Distributed testing with torchrun: the test set is split over GPUS processes and
# the results gathered on rank 0 (padding samples dropped) before evaluation.
#   tools/dist_test.sh CONFIG CHECKPOINT GPUS [test.py args...]
# Several machines: NNODES, NODE_RANK, MASTER_ADDR, PORT as for dist_train.sh.
set -euo pipefail
if [ $# -lt 3 ]; then
    echo "usage: $0 CONFIG CHECKPOINT GPUS [test.py arguments...]" >&2
    exit 2
fi
CONFIG=$1
CHECKPOINT=$2
GPUS=$3
shift 3
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" \
exec "${PYTHON:-python}" -m torch.distributed.run \
    --nnodes="$NNODES" --node_rank="$NODE_RANK" --nproc_per_node="$GPUS" \
    --master_addr="$MASTER_ADDR" --master_port="$PORT" \
    "$ROOT/tools/test.py" "$CONFIG" "$CHECKPOINT" --launcher pytorch "$@"
