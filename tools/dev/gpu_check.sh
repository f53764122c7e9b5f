#!/usr/bin/env bash
# shellcheck disable=SC2317  # functions called indirectly, through step()
# The GPU path end to end, on a machine with one or more CUDA GPUs (docs/gpu.md).
#   tools/dev/gpu_check.sh [--out DIR] [--iters N] [--skip STEP]...
# Run from the repository root after the README's install with a CUDA build of torch;
# installs nothing. Each step prints a header, its time and PASS/FAIL and goes on past
# failures; the summary goes to stdout and DIR/gpu_check_summary.txt (default DIR:
# work_dirs/gpu_check). Exit status 1 if any step failed. PYTHON picks the interpreter.
# --skip STEP (repeatable) reports that step SKIP without running it (e.g. pytest_all, when
# the suite runs elsewhere or in parallel).
set -uo pipefail

OUT=work_dirs/gpu_check
ITERS=40
SKIPS=" "
while [ $# -gt 0 ]; do
    case $1 in
        --out) OUT=${2:?--out needs a folder}; shift 2 ;;
        --iters) ITERS=${2:?--iters needs a number}; shift 2 ;;
        --skip) SKIPS="$SKIPS${2:?--skip needs a step name} "; shift 2 ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        *) echo "usage: $0 [--out DIR] [--iters N] [--skip STEP]..." >&2; exit 2 ;;
    esac
done
if [ ! -f tools/train.py ] || [ ! -d densevit ]; then
    echo "run from the repository root" >&2
    exit 2
fi
PY=${PYTHON:-python}
export PYTHON=$PY  # tools/dist_*.sh read it
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT/logs"
SUMMARY="$OUT/gpu_check_summary.txt"
ROWS=()
FAILED=0
LAST=

# step NAME COMMAND...: run it, its output to the screen and OUT/logs/NAME.log
step() {
    local name=$1 start end secs result
    shift
    if [[ "$SKIPS" == *" $name "* ]]; then
        skip "$name" "--skip"
        return
    fi
    echo
    echo "=== $name: $*"
    start=$(date +%s)
    if "$@" 2>&1 | tee "$OUT/logs/$name.log"; then result=PASS; else result=FAIL; fi
    end=$(date +%s)
    secs=$((end - start))
    LAST=$result
    [ "$result" = FAIL ] && FAILED=$((FAILED + 1))
    echo "=== $name: $result (${secs}s)"
    ROWS+=("$(printf '%-32s %-5s %6s' "$name" "$result" "$secs")")
}

skip() {  # skip NAME REASON: a step that cannot run because an earlier one failed
    echo
    echo "=== $1: SKIP ($2)"
    ROWS+=("$(printf '%-32s %-5s %6s' "$1" SKIP -)")
}

summary() {
    {
        printf '%-32s %-5s %6s\n' step result seconds
        printf '%s\n' "${ROWS[@]}"
        echo "failed steps: $FAILED"
    } | tee "$SUMMARY"
    echo "logs: $OUT/logs, summary: $SUMMARY"
    [ "$FAILED" -eq 0 ]
    exit $?
}

cuda_devices() {
    "$PY" - <<'EOF'
import sys
import torch
print(f'torch {torch.__version__}, CUDA {torch.version.cuda}')
if not torch.cuda.is_available():
    sys.exit('torch.cuda.is_available() is False: install a CUDA build of torch (docs/gpu.md)')
for i in range(torch.cuda.device_count()):
    print(f'cuda:{i}: {torch.cuda.get_device_name(i)}')
EOF
}

show_gpus() { nvidia-smi -L && cuda_devices; }
step gpus show_gpus
if [ "$LAST" != PASS ]; then
    echo "no usable CUDA GPU: nothing else can run" >&2
    summary
fi
# the GPUs this process may use (CUDA_VISIBLE_DEVICES, MIG slices), not every line of nvidia-smi
NGPU=$("$PY" -c 'import torch; print(torch.cuda.device_count())')

export DENSEVIT_TEST_DEVICE=cuda
step pytest_cuda "$PY" -m pytest -q -rs tests/cuda
step pytest_all "$PY" -m pytest -q

QUICK=(detr_vit_shapes deformable_detr_vit_shapes segformer_shapes)
SHORT=(--cfg-options "train_cfg.max_iters=$ITERS" "train_cfg.val_interval=$ITERS")
for name in "${QUICK[@]}"; do
    for mode in fp32 amp; do
        cfg=configs/quickstart/$name.py
        wd=$OUT/$name-$mode
        amp=()
        [ "$mode" = amp ] && amp=(--amp)
        step "train_${name}_$mode" "$PY" tools/train.py "$cfg" "${amp[@]}" --work-dir "$wd" \
            "${SHORT[@]}"
        if [ -f "$wd/iter_$ITERS.pth" ]; then
            step "test_${name}_$mode" "$PY" tools/test.py "$cfg" "$wd/iter_$ITERS.pth" \
                --work-dir "$wd/test"
        else
            skip "test_${name}_$mode" "no $wd/iter_$ITERS.pth"
        fi
    done
done

# torchrun, one process: NCCL process group and DDP around the model
PORT=${PORT:-29517} step dist_train_1gpu_detr bash tools/dist_train.sh \
    configs/quickstart/detr_vit_shapes.py 1 --work-dir "$OUT/dist1_detr" "${SHORT[@]}"

if [ "$NGPU" -ge 2 ]; then
    # the seg quickstart's decode head as SyncBN (its config says BN for one process)
    wd=$OUT/dist2_segformer_syncbn
    PORT=${PORT:-29518} step dist_train_2gpu_segformer_syncbn bash tools/dist_train.sh \
        configs/quickstart/segformer_shapes.py 2 --work-dir "$wd" "${SHORT[@]}" \
        model.decode_head.norm_cfg.type=SyncBN
    if [ -f "$wd/iter_$ITERS.pth" ]; then
        PORT=${PORT:-29519} step dist_test_2gpu_segformer bash tools/dist_test.sh \
            configs/quickstart/segformer_shapes.py "$wd/iter_$ITERS.pth" 2 \
            --work-dir "$wd/test"
    else
        skip dist_test_2gpu_segformer "no $wd/iter_$ITERS.pth"
    fi
else
    skip dist_train_2gpu_segformer_syncbn "$NGPU GPU"
fi
summary
