#!/usr/bin/env bash
# One H200, .whl carried (session of 2026-12-04, seventeenth).
#   PART=matmuls bash bench/h200_s17.sh -> skinny_matmuls_lt.json, .log (cuBLAS vs cuBLASLt vs the Triton kernels,
#                1-256 rows, no sweep), then orpheus_decode.json, .log (issue 10's table: the decode step at context 512,
#                B 1, 64, 256 for cublas, cublaslt, gemv (the default) and fp8, with the floor measured in the run)
#   PART=codec   bash bench/h200_s17.sh -> goodput_codec_{float32,bfloat16}.json, .log: bench/goodput.py (server,
#                Poisson waves of 200 requests) with the SNAC decoder in float32 (the default) and bfloat16
# Wheels: bash ../shared/scripts/device-wheels.sh snac limits deprecated babel emoji markdown-it-py mdurl pyloudnorm
# future httpx2 pytest-timeout soxr pysbd num2words
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
case "${PART:-matmuls}" in
  matmuls)
    timeout ${SKINNY_S:-120} python3 bench/skinny_matmuls.py --batches ${SKINNY_BATCHES:-1,8,64,256} --sweep "" \
        --out $OUT/skinny_matmuls_lt.json > $OUT/skinny_matmuls_lt.log 2>&1
    grep -E "^(qkv|o |gate_up|down|audio_head)" $OUT/skinny_matmuls_lt.log | grep -E "cublas|split_k " | head -60
    timeout ${DECODE_S:-400} python3 bench/decode_matmuls.py --batches ${BATCHES:-1,64,256} --table-batches 1 --sweep 0 \
        --profile-batches "${PROFILE:-}" --modes ${MODES:-cublas,cublaslt,gemv,fp8} --out $OUT/orpheus_decode.json \
        > $OUT/orpheus_decode.log 2>&1
    tail -16 $OUT/orpheus_decode.log ;;
  codec)
    for dtype in float32 bfloat16; do
      timeout ${LIMIT_S:-280} python3 bench/goodput.py --policies edf --rates ${RATES:-22,26,30} --requests 200 \
          --model-options "{\"codec_dtype\": \"$dtype\"}" --out $OUT/goodput_codec_$dtype.json \
          > $OUT/goodput_codec_$dtype.log 2>&1
      echo $dtype; tail -6 $OUT/goodput_codec_$dtype.log
    done ;;
esac
