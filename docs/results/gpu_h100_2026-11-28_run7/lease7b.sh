#!/bin/bash
# lease 7, second call: the 68 tests of next_rest_files.txt the first call's deadline left
# (their ids in .gpu/ids7.txt, passed to pytest.main as a list: no shell word splitting)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout -k 5 "${PYTEST_S:-170}" python3 -c "import sys, pytest; sys.exit(pytest.main(
    ['-n', '14', '-v', '-rfE', '-p', 'no:cacheprovider'] + open('.gpu/ids7.txt').read().splitlines()))" \
    > "$OUT/pytest_rest_call2.log" 2>&1
echo "rc $?"; grep -cE ' PASSED ' "$OUT/pytest_rest_call2.log"; grep -E 'FAILED|ERROR|passed|failed' "$OUT/pytest_rest_call2.log" | tail -15
