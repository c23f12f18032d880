#!/usr/bin/env bash
# Issue 10, session 26, on the device machine from a copy of this tree with .whl carried (../shared/scripts/device-wheels.sh):
#   bash bench/fp8_tiles_s26.sh -> $OUT/gpu_tests_$NAME.log (TESTS), $OUT/row_tiles_$NAME.json/.log (bench/row_tiles.py:
#   the one-row matmuls at TILES, bf16, FP8 in float32 and FP8 in bf16x2 FMAs), then $OUT/orpheus_decode_$NAME.json/.log
#   (bench/decode_matmuls.py: decode steps at BATCHES: bf16 default, FP8 float32, FP8 packed at its default tiles and
#   at the tiles the sweep found fastest over a step's calls).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
GPU="$(nvidia-smi --query-gpu=name --format=csv,noheader), torch $(python3 -c 'import torch; print(torch.__version__)')"
echo "$GPU" | tee $OUT/gpu.txt
header() { echo "# command: $1"; echo "# machine: $GPU"; }
NAME=${NAME:-s26}
TESTS=${TESTS:-"tests/models/test_gemv_gpu.py -k bf16x2"}
header "python3 -m pytest -q $TESTS" > $OUT/gpu_tests_$NAME.log
timeout ${TESTS_S:-120} python3 -m pytest -q -p no:warnings -p no:cacheprovider $TESTS >> $OUT/gpu_tests_$NAME.log 2>&1
tail -15 $OUT/gpu_tests_$NAME.log
CMD="python3 bench/row_tiles.py --out $OUT/row_tiles_$NAME.json --tiles ${TILES:-2,1024,1;2,2048,1;4,1024,1;4,1024,2;2,2048,2;4,2048,2}"
{ header "$CMD"; timeout ${TILES_S:-300} $CMD; } > $OUT/row_tiles_$NAME.log 2>&1
grep -v "^{" $OUT/row_tiles_$NAME.log | tail -12
# the FP8-packed tiles with the least time over one step's calls (28 layers of qkv, o, gate_up, down; one audio head)
BEST=$(python3 - "$OUT/row_tiles_$NAME.json" <<'PY'
import collections, json, sys
rows = json.load(open(sys.argv[1]))["rows"]
calls = {"qkv": 28, "o": 28, "gate_up": 28, "down": 28, "audio_head": 1}
total = collections.defaultdict(float)
for r in rows:
    if r["dtype"] == "fp8p":
        total[tuple(r["tiles"])] += calls[r["shape"]] * r.get("ms", 1e9)
best = min(total, key=total.get)
print("" if list(best) == [2, 1024, 1] else "fp8_fused_pdl_packed@" + "x".join(map(str, best)))
PY
)
echo "FP8 packed tiles to step: $BEST"
MODES="cublas,fused_pdl_skinny,fp8_fused_pdl,fp8_fused_pdl_packed${BEST:+,$BEST}"
CMD="python3 bench/decode_matmuls.py --batches ${BATCHES:-1} --table-batches 1 --sweep 0 --steps 1 --profile-batches ${PROFILE:-none} --modes $MODES --out $OUT/orpheus_decode_$NAME.json"
{ header "$CMD"; timeout ${STEPS_S:-300} $CMD; } > $OUT/orpheus_decode_$NAME.log 2>&1
grep -v "^{" $OUT/orpheus_decode_$NAME.log | tail -16
