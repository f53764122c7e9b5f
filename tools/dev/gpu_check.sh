#!/usr/bin/env bash
# shellcheck disable=SC2317  # functions called indirectly, through step()
# The GPU path end to end, on a machine with one or more CUDA GPUs, in priority order
# (docs/gpu.md):
#   tools/dev/gpu_check.sh [--out DIR] [--iters N] [--deadline S] [--bundle FILE] [--skip STEP]...
#                          [--only STEP]... [--tests FILE]
# Run from the repository root after the README's install with a CUDA build of torch;
# installs nothing. Each step prints a header, its time and PASS/FAIL/TIMEOUT and goes on past
# failures; some steps run at once, in lanes (below); the table (step, result, seconds, lane) is
# rewritten to DIR/gpu_check_summary.txt after
# every step (default DIR: work_dirs/gpu_check). --deadline S: the whole run ends within S
# seconds, each step given the smaller of its own limit and what is left (a step that would get
# under 20 s is reported SKIP). --bundle FILE: after every step, DIR's logs, summary and
# benchmark outputs (no checkpoints) are packed into FILE (.tar.gz), so a run cut short keeps
# them. Exit status 1 if any step failed. PYTHON picks the interpreter. --skip STEP
# (repeatable) reports that step SKIP without running it; --only STEP (repeatable) runs the
# named steps (and `gpus`) and reports every other SKIP. --tests FILE: pytest_rest runs only
# the test files listed in FILE, one per line (say, those an earlier lease did not reach; a
# list of 457 single test ids collected nothing under pytest-xdist there, 2026-11-27).
set -uo pipefail

OUT=work_dirs/gpu_check
ITERS=40
SKIPS=" "
ONLY=" "
TESTS_FILE=
DEADLINE=
BUNDLE=
while [ $# -gt 0 ]; do
    case $1 in
        --out) OUT=${2:?--out needs a folder}; shift 2 ;;
        --iters) ITERS=${2:?--iters needs a number}; shift 2 ;;
        --deadline) DEADLINE=${2:?--deadline needs seconds}; shift 2 ;;
        --bundle) BUNDLE=${2:?--bundle needs a file}; shift 2 ;;
        --skip) SKIPS="$SKIPS${2:?--skip needs a step name} "; shift 2 ;;
        --only) ONLY="$ONLY${2:?--only needs a step name} "; shift 2 ;;
        --tests) TESTS_FILE=${2:?--tests needs a file}; shift 2 ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "usage: $0 [--out DIR] [--iters N] [--deadline S] [--bundle FILE] [--skip STEP]..." \
                "[--only STEP]... [--tests FILE]" >&2
           exit 2 ;;
    esac
done
if [ -n "$TESTS_FILE" ] && [ ! -s "$TESTS_FILE" ]; then
    echo "--tests $TESTS_FILE: no such file, or it is empty" >&2
    exit 2
fi
if [ ! -f tools/train.py ] || [ ! -d densevit ]; then
    echo "run from the repository root" >&2
    exit 2
fi
PY=${PYTHON:-python}
export PYTHON=$PY  # tools/dist_*.sh read it
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT/logs"
SUMMARY="$OUT/gpu_check_summary.txt"
ROWDIR="$OUT/.rows"  # one file per finished step (lanes run in their own processes)
rm -rf "$ROWDIR"
mkdir -p "$ROWDIR"
LAST=
LANE=
PHASE_END=
T0=$(date +%s)

# seconds a step may run: LIMIT, or less when --deadline (or the lanes' share of it) leaves less
allowed() {
    local limit=$1 left end=$DEADLINE
    [ -n "$PHASE_END" ] && end=$PHASE_END
    if [ -n "$end" ]; then
        left=$((end - ($(date +%s) - T0) - 5))
        [ "$left" -lt "$limit" ] && limit=$left
    fi
    echo "$limit"
}

failed_steps() { cat "$ROWDIR"/* 2>/dev/null | grep -cE ' (FAIL|TIMEOUT) '; }

write_summary() {  # under a lock: the lanes finish steps at the same time
    (
        flock 9
        {
            printf '%-36s %-7s %6s %s\n' step result seconds lane
            cat "$ROWDIR"/* 2>/dev/null
            echo "failed steps: $(failed_steps)"
        } > "$SUMMARY"
        if [ -n "$BUNDLE" ]; then
            tar czf "$BUNDLE.tmp" -C "$OUT" --exclude='*.pth' --exclude='*.safetensors' \
                --exclude='*.onnx' --exclude=.rows . 2>/dev/null && mv "$BUNDLE.tmp" "$BUNDLE"
        fi
    ) 9>"$OUT/.lock"
}

add_row() {  # add_row NAME RESULT SECONDS: in the order the steps end
    printf '%-36s %-7s %6s %s\n' "$1" "$2" "$3" "${LANE:--}" \
        > "$ROWDIR/$(date +%s%N)_$1"
    write_summary
}

# step NAME LIMIT COMMAND...: run it for at most LIMIT seconds (fewer near --deadline), its
# output to OUT/logs/NAME.log and to the screen (in a lane: to the lane's log)
step() {
    local name=$1 limit start end secs result rc
    limit=$(allowed "$2")
    shift 2
    if [[ "$SKIPS" == *" $name "* ]]; then
        skip "$name" "--skip"
        return
    fi
    if [ "$ONLY" != " " ] && [ "$name" != gpus ] && [[ "$ONLY" != *" $name "* ]]; then
        skip "$name" "not in --only"
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
    echo "=== $name (at most ${limit}s${LANE:+, lane $LANE}): $*"
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
    echo "=== $name: $result (${secs}s)"
    [ -n "$LANE" ] && echo "=== $name: $result (${secs}s), lane $LANE" >&3
    add_row "$name" "$result" "$secs"
}

skip() {  # skip NAME REASON: a step not run (--skip, an earlier failure, the deadline)
    echo
    echo "=== $1: SKIP ($2)"
    add_row "$1" SKIP -
}

# lane NAME FUNCTION: run FUNCTION's steps in turn, in the background, beside the other lanes
# (wait for them with `wait`); its output goes to OUT/logs/lane_NAME.log, the step results also
# to the screen
lane() {
    echo "=== lane $1 started: $2"
    ( LANE=$1; "$2" 3>&1 > "$OUT/logs/lane_$1.log" 2>&1 ) &
}

summary() {
    local failed
    write_summary
    cat "$SUMMARY"
    echo "logs: $OUT/logs, summary: $SUMMARY${BUNDLE:+, bundle: $BUNDLE}"
    failed=$(failed_steps)
    [ "$failed" -eq 0 ]
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

# 1. the CUDA check, in five lanes at once (a GPU of 80 GB and 16 cores hold them; each lane's
# steps run in turn, their output in OUT/logs/lane_*.log): CPU-vs-CUDA equality, then the
# cuda_path tests; the quickstarts in fp32
# and fp16 AMP, each followed by tools/test.py, and torchrun; Mask2Former and DINO; the windowed
# ViT-B detector with and without activation checkpointing, then DETR panoptic; the
# self-supervised quickstarts (MAE, masked patch prediction, BEiT with a tokenizer made from
# that MAE run, DINO self-distillation)

# -v: one line per test as it ends, so a step cut by its limit still names what failed; a
# module that cannot be collected (a missing optional reference package) is reported, not fatal
XDIST=(-v -p no:cacheprovider --continue-on-collection-errors)
if "$PY" -c 'import xdist' 2>/dev/null; then XDIST+=(-n "${PYTEST_WORKERS:-8}"); fi
# a test that hangs fails with its stack inside the step's limit instead of hiding the summary
if "$PY" -c 'import pytest_timeout' 2>/dev/null; then XDIST+=(--timeout 150); fi

# train_NAME_MODE then test_NAME_MODE: CONFIG for ITERS iterations, MODE fp32 or amp; the rest
# are more --cfg-options
train_and_test() {
    local name=$1 cfg=$2 mode=$3 wd amp=()
    shift 3
    wd=$OUT/$name-$mode
    [[ "$mode" == amp* ]] && amp=(--amp)
    step "train_${name}_$mode" 180 "$PY" tools/train.py "$cfg" "${amp[@]}" --work-dir "$wd" \
        --cfg-options "train_cfg.max_iters=$ITERS" "train_cfg.val_interval=$ITERS" "$@"
    if [ -f "$wd/iter_$ITERS.pth" ]; then
        step "test_${name}_$mode" 120 "$PY" tools/test.py "$cfg" "$wd/iter_$ITERS.pth" \
            --work-dir "$wd/test"
    else
        skip "test_${name}_$mode" "no $wd/iter_$ITERS.pth"
    fi
}

lane_tests() {
    step pytest_cuda 240 "$PY" -m pytest -v -rs tests/cuda
    step pytest_cuda_path 600 "$PY" -m pytest -rfE -m cuda_path "${XDIST[@]}"
}

lane_quickstarts() {
    local name mode
    for name in detr_vit_shapes eomt_vit_shapes_semantic eomt_vit_shapes_panoptic \
            deformable_detr_vit_shapes segformer_shapes; do
        for mode in fp32 amp; do
            case $name in
                eomt_*) train_and_test "$name" "configs/eomt/$name.py" "$mode" ;;
                *) train_and_test "$name" "configs/quickstart/$name.py" "$mode" ;;
            esac
        done
        # torchrun, one process: NCCL process group and DDP around the model
        if [ "$name" = eomt_vit_shapes_panoptic ]; then
            PORT=${PORT:-29517} step dist_train_1gpu_detr 180 bash tools/dist_train.sh \
                configs/quickstart/detr_vit_shapes.py 1 --work-dir "$OUT/dist1_detr" \
                --cfg-options "train_cfg.max_iters=$ITERS" "train_cfg.val_interval=$ITERS"
        fi
    done
}

lane_queries() {  # the query-based models that came after: Mask2Former, DINO
    local mode
    for mode in fp32 amp; do
        train_and_test mask2former_vit_shapes_panoptic \
            configs/mask2former/mask2former_vit_shapes_panoptic.py "$mode"
        train_and_test dino_vit_shapes configs/dino/dino_vit_shapes.py "$mode"
    done
}

lane_pretrain() {  # the self-supervised quickstarts: MAE, masked patch prediction, BEiT, DINO
    local name mode tok=$OUT/beit_tokenizer.pth
    for name in mae_vit_shapes_quickstart mpp_vit_shapes_quickstart; do
        for mode in fp32 amp; do
            train_and_test "$name" "configs/mae/$name.py" "$mode"
        done
    done
    # BEiT's tokenizer: k-means over the patch features of the MAE run just trained (the
    # quickstart's own is made from the 10k-iteration MAE run: a CUDA check, not a codebook)
    local mae=$OUT/mae_vit_shapes_quickstart-fp32/iter_$ITERS.pth
    if [ -f "$mae" ]; then
        step make_beit_tokenizer 120 "$PY" tools/pretrain/make_tokenizer.py \
            configs/mae/mae_vit_shapes_quickstart.py "$mae" --k 512 --num-images 200 \
            --max-features 20000 --out "$tok"
    else
        skip make_beit_tokenizer "no $mae"
    fi
    for mode in fp32 amp; do
        if [ -f "$tok" ]; then
            train_and_test beit_vit_shapes_quickstart \
                configs/beit_ssl/beit_vit_shapes_quickstart.py "$mode" \
                "model.tokenizer.checkpoint=$tok"
        else
            skip "train_beit_vit_shapes_quickstart_$mode" "no $tok"
        fi
        train_and_test dino_vit_shapes_quickstart configs/dino_ssl/dino_vit_shapes_quickstart.py \
            "$mode"
    done
}

lane_vitdet() {  # ViTDet's windowed ViT-B + simple feature pyramid, 512 x 512
    local cfg=configs/vitdet/vitdet_vit-b16_sfp_deformable_detr_shapes.py mode
    for mode in fp32 amp; do
        train_and_test vitdet_vit-b16_shapes "$cfg" "$mode"
        train_and_test vitdet_vit-b16_shapes "$cfg" "${mode}_cp" model.backbone.with_cp=True
    done
    # DETR panoptic: the box stage, then the mask stage from its checkpoint (detector frozen)
    local boxes=configs/detr_panoptic/detr_vit_shapes_panoptic_boxes.py
    for mode in fp32 amp; do
        train_and_test detr_panoptic_boxes "$boxes" "$mode"
        train_and_test detr_panoptic_masks configs/detr_panoptic/detr_vit_shapes_panoptic.py \
            "$mode" "load_from=$OUT/detr_panoptic_boxes-$mode/iter_$ITERS.pth"
    done
}

# the lanes share what is left of --deadline but RESERVE seconds (default 200), kept for the
# race and the memory benchmark that follow on a quiet GPU
if [ -n "$DEADLINE" ]; then
    PHASE_END=$((DEADLINE - ${RESERVE:-200}))
fi
lane tests lane_tests
lane quickstarts lane_quickstarts
lane queries lane_queries
lane vitdet lane_vitdet
lane pretrain lane_pretrain
wait
PHASE_END=

if [ "$NGPU" -ge 2 ]; then
    # the seg quickstart's decode head as SyncBN (its config says BN for one process)
    wd=$OUT/dist2_segformer_syncbn
    PORT=${PORT:-29518} step dist_train_2gpu_segformer_syncbn 180 bash tools/dist_train.sh \
        configs/quickstart/segformer_shapes.py 2 --work-dir "$wd" \
        --cfg-options "train_cfg.max_iters=$ITERS" "train_cfg.val_interval=$ITERS" \
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

# 2. on a quiet GPU: the peak memory of a ViT-L/16 1024 x 1024 training step (checkpointing,
# windowed against global attention), then the race against HF transformers (the earlier
# leases measured SegFormer, DETR and Deformable DETR in TF32 / bf16: docs/benchmarks.md; this
# puts fp16 and Conditional / DAB-DETR first, the rows past the budget left out)
step bench_vit_train_memory 150 "$PY" benchmarks/bench_vit_train_memory.py \
    --json "$OUT/bench_vit_train_memory.json"
budget=$(($(allowed 300) - 60))
[ "$budget" -gt 200 ] && budget=200
step bench_gpu_peers 300 "$PY" benchmarks/bench_gpu_peers.py --budget-s "$budget" \
    --models vit segformer conditional_detr dab_detr deformable_detr detr \
    --precisions fp16 tf32 bf16 --json "$OUT/bench_gpu_peers.json" --profile-dir "$OUT/profiles"

# the newer models against HF on the same weights (fp32): EoMT-S and Mask2Former Swin-T, 512
step bench_eomt_gpu 120 "$PY" benchmarks/bench_eomt.py --device cuda --only speed \
    --json "$OUT/bench_eomt_gpu.json"
step bench_mask2former_gpu 150 "$PY" benchmarks/bench_mask2former.py --device cuda \
    --json "$OUT/bench_mask2former_gpu.json"
# deformable attention's two layouts of the samples on CUDA (query-major, CUDA's default, and
# points-major, the CPU's for inference) against HF's PyTorch path, COCO shapes
step bench_deform_attn_gpu 120 "$PY" benchmarks/bench_deform_attn.py --device cuda --batch 2 \
    --repeats 20 --json "$OUT/bench_deform_attn_gpu.json"

# 3. the rest of the suite, in parallel, as far as time allows (not in a lane: beside the lanes
# its 8 workers starved their data loading, 2026-11-27 in docs/gpu.md)
if [ -n "$TESTS_FILE" ]; then
    mapfile -t rest_ids < "$TESTS_FILE"
    step pytest_rest 900 "$PY" -m pytest -rfE -m 'not cuda_path' "${XDIST[@]}" "${rest_ids[@]}"
else
    step pytest_rest 900 "$PY" -m pytest -rfE -m 'not cuda_path' "${XDIST[@]}"
fi
summary
