#!/usr/bin/env bash
# One H200, .whl carried (session of 2026-12-04, fifteenth): the simulator's cost table measured again on
# the code of issue 10's v9 kernels, then bench/goodput.py beside the simulator's prediction from it,
# with the server's decode steps sampled from /v1/stats during each wave (wall ms a step against the
# cost model's device-time estimate: what the simulator leaves out).
#   PART=cost     bash bench/h200_goodput_s15.sh  -> $OUT/cost_orpheus_h200.json, orpheus_serve_s15.json, .log
#   PART=goodput  bash bench/h200_goodput_s15.sh  -> $OUT/goodput_orpheus_s15.json, .log (uses the
#                 committed bench/results/cost_orpheus_h200.json: copy PART=cost's table there first)
#   PART=profile  bash bench/h200_goodput_s15.sh  -> profile_summary.txt (bench/profile_summary.py of each py-spy
#                 file), profile.tgz (the raw stacks, their summaries, the profiled run's JSON), _switch.json, .log
#   PART=timeline bash bench/h200_goodput_s15.sh  -> gpu_timeline_s15.json, .log (bench/gpu_timeline.py: the GPU's
#                 kernels per stream during in-process waves of ~128 and ~192 streams)
#   PART=codec    bash bench/h200_goodput_s15.sh  -> codec_dtype.json, .log (bench/codec_dtype.py), then
#                 gpu_timeline_codec_{float16,float32,bfloat16}.json, .log: ~192 streams with the SNAC decoder in each
# Wheels (from the repo root, here): bash ../shared/scripts/device-wheels.sh snac limits deprecated babel emoji
# markdown-it-py mdurl pyloudnorm future httpx2 pytest-timeout soxr pysbd num2words py-spy (PART=profile)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
case "${PART:-cost}" in
  cost)
    timeout ${LIMIT_S:-560} python3 bench/orpheus_serve.py --arrival poisson --sessions ${SESSIONS:-128} \
        --requests ${REQUESTS:-200} --max-running 256 --policies edf --cost-out $OUT/cost_orpheus_h200.json \
        --out $OUT/orpheus_serve_s15.json > $OUT/orpheus_serve_s15.log 2>&1
    tail -15 $OUT/orpheus_serve_s15.log ;;
  goodput)
    timeout ${LIMIT_S:-560} python3 bench/goodput.py --policies ${POLICIES:-edf} --rates ${RATES:-18,22,26,30} \
        --requests 200 --out $OUT/goodput_orpheus_s15.json > $OUT/goodput_orpheus_s15.log 2>&1
    tail -12 $OUT/goodput_orpheus_s15.log ;;
  profile)  # py-spy in the server during the 22 and 30 req/s waves; then the same with a 0.25 ms GIL switch interval
    timeout 280 python3 bench/goodput.py --policies edf --rates 22,30 --requests 200 --profile-rates 22,30 \
        --out $OUT/profile/goodput_orpheus_s15_profile.json > $OUT/goodput_orpheus_s15_profile.log 2>&1
    mkdir -p /tmp/sc && echo 'import sys; sys.setswitchinterval(0.00025)' > /tmp/sc/sitecustomize.py
    PYTHONPATH=/tmp/sc:$PYTHONPATH timeout 250 python3 bench/goodput.py --policies edf --rates 22,30 --requests 200 \
        --out $OUT/goodput_orpheus_s15_switch.json > $OUT/goodput_orpheus_s15_switch.log 2>&1
    for f in $OUT/profile/*.txt; do python3 bench/profile_summary.py $f --top 10; done > $OUT/profile_summary.txt 2>&1
    cd $OUT && tar czf profile.tgz profile && rm -rf profile && cd - > /dev/null
    grep -A3 "^MainThread\|^voxgate-cuda" $OUT/profile_summary.txt | head -60
    tail -4 $OUT/goodput_orpheus_s15_profile.log; tail -4 $OUT/goodput_orpheus_s15_switch.log ;;
  timeline)
    timeout ${LIMIT_S:-420} python3 bench/gpu_timeline.py --sessions ${SESSIONS:-128,192} --requests 200,200 \
        --out $OUT/gpu_timeline_s15.json > $OUT/gpu_timeline_s15.log 2>&1
    grep -v "^\[\|USDT\|STAGE:" $OUT/gpu_timeline_s15.log | tail -12 ;;
  codec)
    timeout 60 python3 bench/codec_dtype.py --out $OUT/codec_dtype.json > $OUT/codec_dtype.log 2>&1
    tail -10 $OUT/codec_dtype.log
    for dtype in float16 float32 bfloat16; do
      timeout ${LIMIT_S:-175} python3 bench/gpu_timeline.py --sessions 192 --requests 200 --codec-dtype $dtype \
          --out $OUT/gpu_timeline_codec_$dtype.json > $OUT/gpu_timeline_codec_$dtype.log 2>&1
      echo $dtype; tail -2 $OUT/gpu_timeline_codec_$dtype.log
    done ;;
esac
