#!/usr/bin/env bash
# Issue 9's host time per step, the previous tree against this one on the same device machine (one
# H200): ab_head/ holds the previous tree (`git archive <commit> engine bench models gateway webui static
# migrations | tar -x -C ab_head`), .whl carried. Each tree serves the same 64-stream Poisson wave
# (edf, 200 requests) twice in one process; ORDER (default "head work") says which runs first:
#   ORDER="head work" bash bench/h200_serve_ab.sh   -> $OUT/serve_ab_<tree>.json
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
lscpu | grep -E "Model name|^CPU\(s\)" > $OUT/cpu.txt
for tree in ${ORDER:-head work}; do
  script=bench/orpheus_serve.py; [ $tree = head ] && script=ab_head/bench/orpheus_serve.py
  timeout 280 python3 $script --arrival poisson --sessions 64 --requests 200 --max-running 256 --policies edf \
      --host-variants plain --out $OUT/serve_ab_$tree.json > $OUT/serve_ab_$tree.log 2>&1
done
cat $OUT/cpu.txt
python3 - <<'PY'
import json, os
for tree in os.environ.get("ORDER", "head work").split():
    path = os.path.join(os.environ["OUT"], f"serve_ab_{tree}.json")
    if not os.path.exists(path):
        print(tree, "missing"); continue
    d = json.load(open(path))
    for r in d["rows"] + d.get("host_variants", []):
        print(tree, r.get("variant", r["policy"]), r["attainment"], r["ms_per_step"], r["host_ms_p50"], r["host_ms_p90"])
PY
