#!/usr/bin/env bash
# Issue 10, session 20, on the device machine from a copy of this tree with .whl carried (../shared/scripts/device-wheels.sh):
#   PART=sweep bash bench/h200_s20.sh -> $OUT/gpu_tests.log (the new tests), $OUT/skinny_bf16.json/.log (bf16 split-K tiles
#     at 64 rows, bench/skinny_matmuls.py grid), $OUT/orpheus_decode_s20a.json/.log (B 1, 64: the fused attention with
#     and without its first cache block read before the PDL wait; the 64-row step with the swept tiles)
#     (as it ran for run s20a: its last command's fused_pdl_skinny mode and --skinny-tiles were removed after it, so
#     that command no longer runs; the decode_matmuls.py modes since are in PART=final)
#   PART=final bash bench/h200_s20.sh -> $OUT/gpu_tests.log (the decode path's GPU tests; TESTS_S=0: none),
#     $OUT/orpheus_decode_$NAME.json/.log (NAME=s20; MODES, PROFILE: decode_matmuls.py's --modes, --profile-batches)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
GPU="$(nvidia-smi --query-gpu=name --format=csv,noheader), torch $(python3 -c 'import torch; print(torch.__version__)')"
echo "$GPU" | tee $OUT/gpu.txt
header() { echo "# command: $1"; echo "# machine: $GPU"; }
if [ "$PART" = sweep ]; then
  TESTS="tests/models/test_decode_attention_gpu.py tests/models/test_gemv_gpu.py::test_bf16_shapes_in_the_tiles_table_run_split_k_at_33_to_64_rows tests/models/test_fused_rows_gpu.py"
  header "python3 -m pytest -q $TESTS" > $OUT/gpu_tests.log
  timeout ${TESTS_S:-120} python3 -m pytest -q -p no:warnings -p no:cacheprovider $TESTS >> $OUT/gpu_tests.log 2>&1
  tail -4 $OUT/gpu_tests.log
  for s in qkv o gate_up down audio_head; do  # fill Triton's cache in parallel
    python3 bench/skinny_matmuls.py --batches 64 --sweep 64 --shapes $s --compile-only > /dev/null 2>&1 &
  done
  timeout 150 bash -c wait
  CMD="python3 bench/skinny_matmuls.py --batches 64 --sweep 64 --tiles-out $OUT/skinny_tiles.json --out $OUT/skinny_bf16.json"
  { header "$CMD"; timeout 150 $CMD; } > $OUT/skinny_bf16.log 2>&1
  grep -A8 "best split-K" $OUT/skinny_bf16.log; grep "beating" $OUT/skinny_bf16.log
  CMD="python3 bench/decode_matmuls.py --batches 1,64 --table-batches 1 --sweep 0 --profile-batches none --modes cublas,fused,fused_pdl_nopre,fused_pdl,fused_pdl_skinny --skinny-tiles $OUT/skinny_tiles.json --out $OUT/orpheus_decode_s20a.json"
  { header "$CMD"; timeout ${STEPS_S:-300} $CMD; } > $OUT/orpheus_decode_s20a.log 2>&1
  grep -v "^{" $OUT/orpheus_decode_s20a.log | tail -16
else
  TESTS="tests/models/test_fused_rows_gpu.py tests/models/test_lm_runner_gpu.py tests/models/test_gemv_gpu.py tests/models/test_decode_attention_gpu.py"
  if [ "${TESTS_S:-200}" != 0 ]; then
    header "python3 -m pytest -q $TESTS" > $OUT/gpu_tests.log
    timeout ${TESTS_S:-200} python3 -m pytest -q -p no:warnings -p no:cacheprovider $TESTS >> $OUT/gpu_tests.log 2>&1
    tail -4 $OUT/gpu_tests.log
  fi
  CMD="python3 bench/decode_matmuls.py --batches ${BATCHES:-1,64,256} --table-batches 1 --sweep 0 --profile-batches ${PROFILE:-1,64} --modes ${MODES:-cublas,fused,fused_pdl_nopre,fused_pdl,fp8_fused_pdl} --out $OUT/orpheus_decode_${NAME:-s20}.json"
  { header "$CMD"; timeout ${STEPS_S:-330} $CMD; } > $OUT/orpheus_decode_${NAME:-s20}.log 2>&1
  grep -v "^{" $OUT/orpheus_decode_${NAME:-s20}.log | tail -22
fi
