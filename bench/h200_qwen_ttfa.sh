#!/usr/bin/env bash
# One H200, .whl carried (session of 2026-12-02, eighth): Qwen3-TTS's time to first audio, split by
# the engine's phases (/v1/stats ttfa_phases_ms). The GPU tests of the prepare stream and the
# frame graphs, then bench/goodput.py on one random full-size checkpoint written once:
#   BASE=1: first edf at 8/s with prompts built on the default stream (`prepare_stream` false);
#   then edf and fifo with the commit's defaults.          bash bench/h200_qwen_ttfa.sh
# At most 8 files come back from the device: logs go into one, the plots stay behind.
# Wheels (from the repo root, here): bash ../shared/scripts/device-wheels.sh snac limits deprecated babel emoji
# markdown-it-py mdurl pyloudnorm future httpx2 pytest-timeout soxr pysbd num2words librosa decorator pooch
# audioread lazy_loader msgpack platformdirs (librosa and the last six: the Base model's GPU tests).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
LOG=$OUT/run.log
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader | tee $LOG
timeout 100 python3 -m pytest -q -p no:warnings -p no:cacheprovider tests/models/test_qwen3_tts_prepare_gpu.py \
    tests/models/test_qwen3_tts_frame_graphs_gpu.py ${TESTS:-} 2>&1 | grep -v "^  " | tail -${TEST_LINES:-25} >> $LOG
tail -4 $LOG
CK=/tmp/qwen_full
run() {  # name, timeout, goodput args...
  local name=$1 limit=$2; shift 2
  echo "# python bench/goodput.py $* --out $name.json" >> $LOG
  timeout $limit python3 bench/goodput.py --family qwen3_tts --requests 200 --checkpoint $CK "$@" \
      --out /tmp/res/$name.json >> $LOG 2>&1
  cp /tmp/res/$name.json $OUT/ 2>/dev/null
  grep -A12 "^  policy" $LOG | tail -8
}
mkdir -p /tmp/res
[ "${BASE:-0}" = 1 ] && run goodput_qwen3_tts_ttfa_base 150 --policies edf --rates 8 --model-options '{"prepare_stream": false}'
run ${NAME:-goodput_qwen3_tts_ttfa}_edf ${EDF_S:-240} --policies edf --rates ${RATES:-4,8,16,24}
run ${NAME:-goodput_qwen3_tts_ttfa}_fifo ${FIFO_S:-130} --policies fifo --rates ${FIFO_RATES:-8,16}
