#!/usr/bin/env bash
# shellcheck disable=SC2317  # functions called indirectly, through step()
# The GPU path end to end, on a machine with one or more CUDA GPUs, in priority order
# (docs/gpu.md):
#   tools/dev/gpu_check.sh [--out DIR] [--iters N] [--deadline S] [--bundle FILE] [--skip STEP]...
# Run from the repository root after the README's install with a CUDA build of torch;
# installs nothing. Each step prints a header, its time and PASS/FAIL/TIMEOUT and goes on past
# failures; the table (step, result, seconds) is rewritten to DIR/gpu_check_summary.txt after
# every step (default DIR: work_dirs/gpu_check). --deadline S: the whole run ends within S
# seconds, each step given the smaller of its own limit and what is left (a step that would get
# under 20 s is reported SKIP). --bundle FILE: after every step, DIR's logs, summary and
# benchmark outputs (no checkpoints) are packed into FILE (.tar.gz), so a run cut short keeps
# them. Exit status 1 if any step failed. PYTHON picks the interpreter. --skip STEP
# (repeatable) reports that step SKIP without running it.
set -uo pipefail

OUT=work_dirs/gpu_check
ITERS=40
SKIPS=" "
DEADLINE=
BUNDLE=
while [ $# -gt 0 ]; do
    case $1 in
        --out) OUT=${2:?--out needs a folder}; shift 2 ;;
        --iters) ITERS=${2:?--iters needs a number}; shift 2 ;;
        --deadline) DEADLINE=${2:?--deadline needs seconds}; shift 2 ;;
        --bundle) BUNDLE=${2:?--bundle needs a file}; shift 2 ;;
        --skip) SKIPS="$SKIPS${2:?--skip needs a step name} "; shift 2 ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "usage: $0 [--out DIR] [--iters N] [--deadline S] [--bundle FILE] [--skip STEP]..." >&2
           exit 2 ;;
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
T0=$(date +%s)

# seconds a step may run: LIMIT, or less when --deadline leaves less
allowed() {
    local limit=$1 left
    if [ -n "$DEADLINE" ]; then
        left=$((DEADLINE - ($(date +%s) - T0) - 5))
        [ "$left" -lt "$limit" ] && limit=$left
    fi
    echo "$limit"
}

write_summary() {
    {
        printf '%-36s %-7s %6s\n' step result seconds
        printf '%s\n' "${ROWS[@]}"
        echo "failed steps: $FAILED"
    } > "$SUMMARY"
    if [ -n "$BUNDLE" ]; then
        tar czf "$BUNDLE.tmp" -C "$OUT" --exclude='*.pth' --exclude='*.safetensors' \
            --exclude='*.onnx' . 2>/dev/null && mv "$BUNDLE.tmp" "$BUNDLE"
    fi
}

# step NAME LIMIT COMMAND...: run it for at most LIMIT seconds (fewer near --deadline), its
# output to the screen and OUT/logs/NAME.log
step() {
    local name=$1 limit start end secs result rc
    limit=$(allowed "$2")
    shift 2
    if [[ "$SKIPS" == *" $name "* ]]; then
        skip "$name" "--skip"
        return
    fi
    if [ "$limit" -lt 20 ]; then
        skip "$name" "--deadline reached"
        return
    fi
    if declare -F "$1" >/dev/null; then  # a shell function: timeout runs programs only
        set -- bash -c '"$@"' _ "$@"
    fi
    echo
    echo "=== $name (at most ${limit}s): $*"
    start=$(date +%s)
    timeout -k 10 "$limit" "$@" 2>&1 | tee "$OUT/logs/$name.log"
    rc=${PIPESTATUS[0]}
    case $rc in
        0) result=PASS ;;
        124|137) result=TIMEOUT ;;
        *) result=FAIL ;;
    esac
    end=$(date +%s)
    secs=$((end - start))
    LAST=$result
    [ "$result" != PASS ] && FAILED=$((FAILED + 1))
    echo "=== $name: $result (${secs}s)"
    ROWS+=("$(printf '%-36s %-7s %6s' "$name" "$result" "$secs")")
    write_summary
}

skip() {  # skip NAME REASON: a step not run (--skip, an earlier failure, the deadline)
    echo
    echo "=== $1: SKIP ($2)"
    ROWS+=("$(printf '%-36s %-7s %6s' "$1" SKIP -)")
    write_summary
}

summary() {
    write_summary
    cat "$SUMMARY"
    echo "logs: $OUT/logs, summary: $SUMMARY${BUNDLE:+, bundle: $BUNDLE}"
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
export PY
export -f cuda_devices show_gpus
step gpus 60 show_gpus
if [ "$LAST" != PASS ] && [[ "$SKIPS" != *" gpus "* ]]; then  # --skip gpus: a CPU dry run
    echo "no usable CUDA GPU: nothing else can run" >&2
    summary
fi
# the GPUs this process may use (CUDA_VISIBLE_DEVICES, MIG slices), not every line of nvidia-smi
NGPU=$("$PY" -c 'import torch; print(torch.cuda.device_count())')
export DENSEVIT_TEST_DEVICE=cuda

# 1. the CUDA check: CPU-vs-CUDA equality, the quickstarts in fp32 and fp16 AMP, torchrun
step pytest_cuda 240 "$PY" -m pytest -v -rs tests/cuda

QUICK=(detr_vit_shapes deformable_detr_vit_shapes segformer_shapes)
SHORT=(--cfg-options "train_cfg.max_iters=$ITERS" "train_cfg.val_interval=$ITERS")
for name in "${QUICK[@]}"; do
    for mode in fp32 amp; do
        cfg=configs/quickstart/$name.py
        wd=$OUT/$name-$mode
        amp=()
        [ "$mode" = amp ] && amp=(--amp)
        step "train_${name}_$mode" 180 "$PY" tools/train.py "$cfg" "${amp[@]}" \
            --work-dir "$wd" "${SHORT[@]}"
        if [ -f "$wd/iter_$ITERS.pth" ]; then
            step "test_${name}_$mode" 120 "$PY" tools/test.py "$cfg" "$wd/iter_$ITERS.pth" \
                --work-dir "$wd/test"
        else
            skip "test_${name}_$mode" "no $wd/iter_$ITERS.pth"
        fi
    done
done

# torchrun, one process: NCCL process group and DDP around the model
PORT=${PORT:-29517} step dist_train_1gpu_detr 180 bash tools/dist_train.sh \
    configs/quickstart/detr_vit_shapes.py 1 --work-dir "$OUT/dist1_detr" "${SHORT[@]}"

if [ "$NGPU" -ge 2 ]; then
    # the seg quickstart's decode head as SyncBN (its config says BN for one process)
    wd=$OUT/dist2_segformer_syncbn
    PORT=${PORT:-29518} step dist_train_2gpu_segformer_syncbn 180 bash tools/dist_train.sh \
        configs/quickstart/segformer_shapes.py 2 --work-dir "$wd" "${SHORT[@]}" \
        model.decode_head.norm_cfg.type=SyncBN
    if [ -f "$wd/iter_$ITERS.pth" ]; then
        PORT=${PORT:-29519} step dist_test_2gpu_segformer 120 bash tools/dist_test.sh \
            configs/quickstart/segformer_shapes.py "$wd/iter_$ITERS.pth" 2 \
            --work-dir "$wd/test"
    else
        skip dist_test_2gpu_segformer "no $wd/iter_$ITERS.pth"
    fi
else
    skip dist_train_2gpu_segformer_syncbn "$NGPU GPU"
fi

# 2. the race against HF transformers on the same GPU (its own budget: ~4 minutes)
# (the first lease measured the three default models in TF32 / bf16: docs/benchmarks.md; this
# adds Conditional / DAB-DETR and fp16, the rows cut by the budget where time runs out)
step bench_gpu_peers 300 "$PY" benchmarks/bench_gpu_peers.py --budget-s 200 \
    --models segformer detr deformable_detr conditional_detr dab_detr \
    --precisions tf32 bf16 fp16 --json "$OUT/bench_gpu_peers.json" --profile-dir "$OUT/profiles"

# 3. the tests whose code path changes when CUDA is present (pytest.ini: cuda_path), then the
# rest of the suite, in parallel, as far as time allows
# -v: one line per test as it ends, so a step cut by its limit still names what failed
XDIST=(-v -p no:cacheprovider)
if "$PY" -c 'import xdist' 2>/dev/null; then XDIST+=(-n "${PYTEST_WORKERS:-8}"); fi
if "$PY" -c 'import pytest_timeout' 2>/dev/null; then XDIST+=(--timeout 300); fi
step pytest_cuda_path 600 "$PY" -m pytest -q -m cuda_path "${XDIST[@]}"
step pytest_rest 900 "$PY" -m pytest -q -m 'not cuda_path' "${XDIST[@]}"
summary
