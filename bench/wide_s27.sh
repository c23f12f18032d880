#!/usr/bin/env bash
# Issue 10, session 27, on the device machine from a copy of this tree with .whl carried (../shared/scripts/device-wheels.sh):
#   bash bench/wide_s27.sh -> $OUT/gpu.txt, $OUT/wide_matmuls_$NAME.json/.log (bench/wide_matmuls.py: cuBLAS, cuBLASLt and
#   Triton GEMMs at 256 rows; INDUCTOR=1 adds torch.compile max-autotune, its autotune tables in the log).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
GPU="$(nvidia-smi --query-gpu=name --format=csv,noheader), torch $(python3 -c 'import torch; print(torch.__version__)')"
echo "$GPU" | tee $OUT/gpu.txt
CMD="python3 bench/wide_matmuls.py --batches ${BATCHES:-256} --shapes ${SHAPES:-qkv,o,gate_up,down} $([ "${INDUCTOR:-0}" = 1 ] || echo --no-inductor) --out $OUT/wide_matmuls_${NAME:-s27}.json"
{ echo "# command: $CMD"; echo "# machine: $GPU"; timeout ${WIDE_S:-520} $CMD; } > $OUT/wide_matmuls_${NAME:-s27}.log 2>&1
grep -v "^{" $OUT/wide_matmuls_${NAME:-s27}.log | tail -40
