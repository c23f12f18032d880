#!/usr/bin/env bash
# Issue 10, session 26, on the device machine from a copy of this tree with .whl carried (../shared/scripts/device-wheels.sh):
#   bash bench/fp8_tiles_s26.sh -> $OUT/row_tiles_$NAME.json/.log (bench/row_tiles.py: the one-row matmuls' tiles, bf16
#   and FP8), then $OUT/orpheus_decode_$NAME.json/.log (bench/decode_matmuls.py: decode steps at BATCHES for the default
#   bf16 and FP8 modes and FP8 with each of the two tiles the sweep found fastest over a step's calls; profiled at PROFILE).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
GPU="$(nvidia-smi --query-gpu=name --format=csv,noheader), torch $(python3 -c 'import torch; print(torch.__version__)')"
echo "$GPU" | tee $OUT/gpu.txt
header() { echo "# command: $1"; echo "# machine: $GPU"; }
NAME=${NAME:-s26}
CMD="python3 bench/row_tiles.py --out $OUT/row_tiles_$NAME.json"
{ header "$CMD"; timeout ${TILES_S:-300} $CMD; } > $OUT/row_tiles_$NAME.log 2>&1
grep -v "^{" $OUT/row_tiles_$NAME.log | tail -14
# the two FP8 tiles with the least time over one step's calls (28 layers of qkv, o, gate_up, down; one audio head)
BEST=$(python3 - "$OUT/row_tiles_$NAME.json" <<'PY'
import collections, json, sys
rows = json.load(open(sys.argv[1]))["rows"]
calls = {"qkv": 28, "o": 28, "gate_up": 28, "down": 28, "audio_head": 1}
total = collections.defaultdict(float)
for r in rows:
    if r["dtype"] == "fp8":
        total[tuple(r["tiles"])] += calls[r["shape"]] * r.get("ms", 1e9)
best = sorted(total, key=total.get)[:2]
print(" ".join("fp8_fused_pdl@" + "x".join(map(str, t)) for t in best if list(t) != [2, 1024, 1]))
PY
)
echo "FP8 tiles to step: $BEST"
MODES="cublas,fused_pdl_skinny,fp8_fused_pdl$(for m in $BEST; do printf ',%s' "$m"; done)"
CMD="python3 bench/decode_matmuls.py --batches ${BATCHES:-1,256} --table-batches 1 --sweep 0 --steps 1 --profile-batches ${PROFILE:-256} --modes $MODES --out $OUT/orpheus_decode_$NAME.json"
{ header "$CMD"; timeout ${STEPS_S:-360} $CMD; } > $OUT/orpheus_decode_$NAME.log 2>&1
grep -v "^{" $OUT/orpheus_decode_$NAME.log | tail -30
