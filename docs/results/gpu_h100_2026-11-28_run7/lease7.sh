#!/bin/bash
# lease 7 (2026-11-28): the race's new rows (ViT-B/16 eager, SegFormer-B0 fp16 again, ViT-B/16
# under torch.compile), then the 87 tests that never ran on a GPU, through tools/dev/gpu_check.sh
set -u
T0=$(date +%s)
CALL_S=${CALL_S:-540}
left() { echo $(( CALL_S - ($(date +%s) - T0) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader
  python3 -c 'import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, torch.version.cuda, transformers.__version__)'
} 2>&1 | tee "$OUT/versions.txt"
echo "=== eager race ($(left)s left)"
timeout -k 5 200 python3 benchmarks/bench_gpu_peers.py --budget-s 130 --models vit segformer \
    --precisions fp16 tf32 bf16 --json "$OUT/bench_gpu_peers.json" --profile-dir /tmp/profiles
echo "rc $?"
echo "=== compiled ViT-B/16 ($(left)s left)"
timeout -k 5 170 python3 benchmarks/bench_gpu_peers.py --budget-s 100 --models vit --compile \
    --precisions bf16 tf32 --json "$OUT/bench_gpu_peers_compile.json" --profile-dir /tmp/profiles
echo "rc $?"
tar czf "$OUT/profiles.tgz" -C /tmp profiles 2>/dev/null
echo "=== gpu_check pytest_rest ($(left)s left)"
PYTHON=python3 PYTEST_WORKERS=${WORKERS:-12} RESERVE=0 tools/dev/gpu_check.sh --out /tmp/gc \
    --deadline $(( $(left) - 15 )) --bundle "$OUT/gpu_check.tgz" --only pytest_rest \
    --tests docs/results/gpu_h100_2026-11-27_run6/next_rest_files.txt
cp /tmp/gc/gpu_check_summary.txt "$OUT/" 2>/dev/null; cat /tmp/gc/gpu_check_summary.txt
grep -E 'passed|failed' /tmp/gc/logs/pytest_rest.log | tail -3
