#!/usr/bin/env bash
# Issue 10, item 4, session 28: FP8 one-row matmuls as W8A8 on the tensor cores (models/fp8_dot.py), on the device
# machine from a copy of this tree with .whl carried (wheels: see bench/h200_s22.sh's first line):
#   bash bench/fp8_dot_s28.sh -> $OUT/gpu.txt, $OUT/gpu_tests.log (TESTS, TESTS_S=0: none),
#   $OUT/fp8_dot_rows_$NAME.json/.log (bench/fp8_dot_rows.py at ROWS), $OUT/orpheus_decode_$NAME.json/.log
#   (bench/decode_matmuls.py: decode steps at BATCHES for MODES).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
GPU="$(nvidia-smi --query-gpu=name --format=csv,noheader), torch $(python3 -c 'import torch; print(torch.__version__)')"
echo "$GPU" | tee $OUT/gpu.txt
header() { echo "# command: $1"; echo "# machine: $GPU"; }
NAME=${NAME:-s28}
TESTS=${TESTS:-"tests/models/test_fp8_dot_gpu.py"}
if [ "${TESTS_S:-150}" != 0 ]; then
  header "python3 -m pytest -q $TESTS" > $OUT/gpu_tests.log
  timeout ${TESTS_S:-150} python3 -m pytest -q -x -p no:warnings -p no:cacheprovider $TESTS >> $OUT/gpu_tests.log 2>&1
  tail -15 $OUT/gpu_tests.log
fi
if [ "${ROWS_S:-200}" != 0 ]; then
  CMD="python3 bench/fp8_dot_rows.py --rows ${ROWS:-1,64} ${TILES:+--tiles $TILES} --out $OUT/fp8_dot_rows_$NAME.json"
  { header "$CMD"; timeout ${ROWS_S:-200} $CMD; } > $OUT/fp8_dot_rows_$NAME.log 2>&1
  grep -v "^{" $OUT/fp8_dot_rows_$NAME.log | tail -40
fi
if [ "${STEPS_S:-220}" != 0 ]; then
  CMD="python3 bench/decode_matmuls.py --batches ${BATCHES:-1,64} --table-batches 1 --sweep 0 --profile-batches none --modes ${MODES:-cublas,fused_pdl,fp8_fused_pdl,fp8a_fused_pdl} --out $OUT/orpheus_decode_$NAME.json"
  { header "$CMD"; timeout ${STEPS_S:-220} $CMD; } > $OUT/orpheus_decode_$NAME.log 2>&1
  grep -v "^{" $OUT/orpheus_decode_$NAME.log | tail -25
fi
