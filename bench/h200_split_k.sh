#!/usr/bin/env bash
# Issue 10, split-K matmuls for 2-64 rows and the decode attention with its new key outside the loop, on the
# device machine (one H200), from a copy of this tree with .whl carried (.whl/old_decode_attention.py: the
# attention before, `git show <commit>:models/decode_attention.py`):
#   PART=kernels bash bench/h200_split_k.sh -> $OUT/gpu_tests.log, decode_attention_ab.json, skinny_matmuls.json
#   PART=steps bash bench/h200_split_k.sh   -> $OUT/orpheus_decode_split_k.json, serve_split_k_<0|1>.json
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
if [ "${PART:-kernels}" = kernels ]; then
  timeout 240 python3 -m pytest -q -p no:warnings -p no:cacheprovider tests/models/test_decode_attention_gpu.py \
      tests/models/test_gemv_gpu.py tests/models/test_lm_runner_gpu.py > $OUT/gpu_tests.log 2>&1
  tail -6 $OUT/gpu_tests.log
  timeout 120 python3 bench/decode_attention_tiles.py --batches 1,8,64,256 --baseline .whl/old_decode_attention.py \
      --tiles "32,4,3;32,4,2;64,4,2;64,4,3;128,4,2" --out $OUT/decode_attention_ab.json > $OUT/decode_attention_ab.log 2>&1
  grep -v '^{' $OUT/decode_attention_ab.log | tail -32
  for shape in qkv o gate_up down audio_head; do  # compile the sweep's kernels in parallel (Triton's cache)
    timeout 200 python3 bench/skinny_matmuls.py --shapes $shape --compile-only --out /tmp/c.json > $OUT/compile_$shape.log 2>&1 &
  done
  wait
  timeout 240 python3 bench/skinny_matmuls.py --sweep ${SWEEP:-16,64} --out $OUT/skinny_matmuls.json > $OUT/skinny_matmuls.log 2>&1
  grep -v '^{' $OUT/skinny_matmuls.log | tail -90
else
  timeout ${STEPS_S:-400} python3 bench/decode_matmuls.py --batches ${BATCHES:-1,8,16,64,256} --table-batches 1 --sweep 0 \
      --profile-batches ${PROFILE:-64} --modes ${MODES:-cublas,gemv_nosplit,gemv,fp8_nosplit,fp8} \
      --out $OUT/orpheus_decode_split_k.json > $OUT/decode_matmuls.log 2>&1
  grep -v '^{' $OUT/decode_matmuls.log | tail -45
fi
