#!/usr/bin/env bash
# Wheels (from the repo root): bash ../shared/scripts/device-wheels.sh snac limits deprecated babel emoji markdown-it-py mdurl pyloudnorm einops soxr pysbd num2words httptools uvloop python-slugify text-unidecode
#   (the GPU test files import tests/conftest.py, hence gateway/: soxr, pysbd, num2words, httptools since session 27)
# Issue 10, session 22, on the device machine from a copy of this tree with .whl carried (../shared/scripts/device-wheels.sh):
#   bash bench/h200_s22.sh -> $OUT/gpu.txt (the machine), $OUT/gpu_tests.log (TESTS; TESTS_S=0: none),
#   $OUT/orpheus_decode_$NAME.json/.log (bench/decode_matmuls.py: the matmul table at TABLE rows, then decode steps
#   at BATCHES for MODES, profiled at PROFILE). Run s22 (bench/results/orpheus_decode.md v13) named its TESTS and
#   MODES, two of which (the FP8 bits experiment's) were removed after it.
# Next (an H200): TESTS_S=150 TESTS="tests/models/test_skinny_gpu.py tests/models/test_fused_rows_gpu.py" BATCHES=1,16,48,64,256 TABLE=1 PROFILE=none MODES=cublas,fused_pdl,fused_pdl_skinny,fp8_fused_pdl (v14 on an H200)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
GPU="$(nvidia-smi --query-gpu=name --format=csv,noheader), torch $(python3 -c 'import torch; print(torch.__version__)')"
echo "$GPU" | tee $OUT/gpu.txt
header() { echo "# command: $1"; echo "# machine: $GPU"; }
TESTS=${TESTS:-"tests/models/test_skinny_gpu.py tests/models/test_fused_rows_gpu.py"}
if [ "${TESTS_S:-150}" != 0 ]; then
  header "python3 -m pytest -q $TESTS" > $OUT/gpu_tests.log
  timeout ${TESTS_S:-150} python3 -m pytest -q -p no:warnings -p no:cacheprovider $TESTS >> $OUT/gpu_tests.log 2>&1
  tail -4 $OUT/gpu_tests.log
fi
CMD="python3 bench/decode_matmuls.py --batches ${BATCHES:-1,64,256} --table-batches ${TABLE:-1} --sweep 0 --profile-batches ${PROFILE:-1} --modes ${MODES:-cublas,fused,fused_pdl,fp8_fused_pdl_cvt,fp8_fused_pdl} --out $OUT/orpheus_decode_${NAME:-s22}.json"
{ header "$CMD"; timeout ${STEPS_S:-400} $CMD; } > $OUT/orpheus_decode_${NAME:-s22}.log 2>&1
grep -v "^{" $OUT/orpheus_decode_${NAME:-s22}.log | tail -30
