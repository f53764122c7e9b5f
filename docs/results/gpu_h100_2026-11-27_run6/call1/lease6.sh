#!/bin/bash
# lease 6 (2026-11-27): the two CPU aborts under cuda-gdb, then the benchmarks and the tests
# the fifth run did not reach, through tools/dev/gpu_check.sh
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
nvidia-smi -L; python3 -c 'import torch, transformers; print(torch.__version__, transformers.__version__)'
echo "core_pattern: $(cat /proc/sys/kernel/core_pattern)"
echo "=== aborts under cuda-gdb"
TORCH_SHOW_CPP_STACKTRACES=1 timeout -k 5 "${GDB_S:-150}" cuda-gdb -batch -ex 'set pagination off' \
    -ex run -ex bt -ex 'info threads' --args python3 -X faulthandler -m pytest \
    -p no:cacheprovider -p no:xdist -v \
    'tests/models/test_deformable_detr.py::test_deformable_detr_losses_with_dn_and_empty_image' \
    tests/models/test_dino.py > "$OUT/abort_gdb.log" 2>&1
echo "cuda-gdb rc $?"; grep -E 'PASSED|FAILED|SIGABRT|^#[0-9]+ ' "$OUT/abort_gdb.log" | head -40
left=$(( ${CALL_S:-550} - ($(date +%s) - T0) ))
echo "=== gpu_check with ${left}s left"
ulimit -c unlimited
mkdir -p /tmp/cores && cd /tmp/cores && cd - >/dev/null
PYTHON=python3 PYTEST_WORKERS=${WORKERS:-12} RESERVE=0 tools/dev/gpu_check.sh --out /tmp/gc \
    --deadline $((left - 25)) --bundle "$OUT/gpu_check.tgz" --only bench_mask2former_gpu \
    --only bench_deform_attn_gpu --only pytest_rest --tests .gpu/rest_left.txt ${GC_EXTRA:-}
for c in $(ls core* /tmp/gc/core* 2>/dev/null | head -2); do
    echo "=== core $c"; timeout 30 cuda-gdb -batch -ex bt python3 "$c" 2>&1 | grep -E '^#' | head -40
done | tee "$OUT/cores_bt.log"
cp /tmp/gc/gpu_check_summary.txt "$OUT/" 2>/dev/null; cat /tmp/gc/gpu_check_summary.txt
