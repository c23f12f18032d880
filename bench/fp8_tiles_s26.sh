#!/usr/bin/env bash
# Issue 10, session 26, on the device machine from a copy of this tree with .whl carried (../shared/scripts/device-wheels.sh):
#   bash bench/fp8_tiles_s26.sh -> $OUT/gpu_tests_$NAME.log (TESTS), $OUT/ncu_rows_$NAME.txt (Nsight Compute on the
#   gate/up matmul at NCU tiles), $OUT/row_tiles_$NAME.json/.log (bench/row_tiles.py at TILES, bf16 and FP8), then
#   $OUT/orpheus_decode_$NAME.json/.log (bench/decode_matmuls.py: decode steps at BATCHES: the default modes and each
#   with the tiles the sweep found fastest over a step's calls, bf16 and FP8). Runs s26d and s26g
#   (bench/results/orpheus_decode.md, session 26) gave TILES and NCU a fourth number, REDUCE and GROUP, of two
#   experiments removed after them.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
GPU="$(nvidia-smi --query-gpu=name --format=csv,noheader), torch $(python3 -c 'import torch; print(torch.__version__)')"
echo "$GPU" | tee $OUT/gpu.txt
header() { echo "# command: $1"; echo "# machine: $GPU"; }
NAME=${NAME:-s26}
TESTS=${TESTS:-"tests/models/test_gemv_gpu.py"}
header "python3 -m pytest -q $TESTS" > $OUT/gpu_tests_$NAME.log
timeout ${TESTS_S:-150} python3 -m pytest -q -p no:warnings -p no:cacheprovider $TESTS >> $OUT/gpu_tests_$NAME.log 2>&1
tail -5 $OUT/gpu_tests_$NAME.log
NCU_TILES=${NCU:-"2,1024,1 4,1024,2"}
N=$(( $(echo $NCU_TILES | wc -w) * 2 ))
CMD="/usr/local/cuda/bin/ncu --kernel-name regex:_rows_kernel --launch-skip $N --launch-count $N --section SpeedOfLight --section Occupancy --section LaunchStats python3 bench/ncu_rows.py $NCU_TILES"
{ header "$CMD"; timeout 120 $CMD; } > $OUT/ncu_rows_$NAME.txt 2>&1
grep -E 'Duration|DRAM Throughput|Registers Per|Achieved Occupancy' $OUT/ncu_rows_$NAME.txt
CMD="python3 bench/row_tiles.py --out $OUT/row_tiles_$NAME.json --tiles ${TILES:-2,1024,1;4,1024,1;4,1024,2;2,2048,2}"
{ header "$CMD"; timeout ${TILES_S:-240} $CMD; } > $OUT/row_tiles_$NAME.log 2>&1
grep -v "^{" $OUT/row_tiles_$NAME.log | tail -11
# per weight type, the tiles with the least time over one step's calls (28 layers of qkv, o, gate_up, down; one head)
read BF16 FP8 <<< $(python3 - "$OUT/row_tiles_$NAME.json" <<'PY'
import collections, json, sys
rows = json.load(open(sys.argv[1]))["rows"]
calls = {"qkv": 28, "o": 28, "gate_up": 28, "down": 28, "audio_head": 1}
for dtype in ("bf16", "fp8"):
    total = collections.defaultdict(float)
    for r in rows:
        if r["dtype"] == dtype:
            total[tuple(r["tiles"])] += calls[r["shape"]] * r.get("ms", 1e9)
    print("x".join(map(str, min(total, key=total.get))), end=" ")
PY
)
echo "best tiles: bf16 $BF16, fp8 $FP8"
MODES="cublas,fused_pdl_skinny,fused_pdl_skinny@$BF16,fp8_fused_pdl,fp8_fused_pdl@$FP8"
CMD="python3 bench/decode_matmuls.py --batches ${BATCHES:-1} --table-batches 1 --sweep 0 --steps 1 --profile-batches ${PROFILE:-none} --modes $MODES --out $OUT/orpheus_decode_$NAME.json"
{ header "$CMD"; timeout ${STEPS_S:-300} $CMD; } > $OUT/orpheus_decode_$NAME.log 2>&1
grep -v "^{" $OUT/orpheus_decode_$NAME.log | tail -8
