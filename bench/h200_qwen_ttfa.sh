#!/usr/bin/env bash
# One H200, .whl carried (session of 2026-12-02, eighth): Qwen3-TTS's time to first audio, split by
# the engine's phases (/v1/stats ttfa_phases_ms). The GPU tests of the prepare stream and the
# frame graphs, then bench/goodput.py on one random full-size checkpoint written once:
#   A: edf at 8/s with prompts built on the default stream (`prepare_stream` false, as before);
#   B: edf and fifo with this commit's defaults.          bash bench/h200_qwen_ttfa.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
timeout 90 python3 -m pytest -q -p no:warnings -p no:cacheprovider tests/models/test_qwen3_tts_prepare_gpu.py \
    tests/models/test_qwen3_tts_frame_graphs_gpu.py > $OUT/gpu_tests.log 2>&1
tail -3 $OUT/gpu_tests.log
CK=/tmp/qwen_full
timeout ${BASE_S:-150} python3 bench/goodput.py --family qwen3_tts --policies edf --rates 8 --requests 200 --checkpoint $CK \
    --model-options '{"prepare_stream": false}' --out $OUT/goodput_qwen3_tts_ttfa_base.json > $OUT/goodput_base.log 2>&1
tail -4 $OUT/goodput_base.log
timeout ${EDF_S:-210} python3 bench/goodput.py --family qwen3_tts --policies edf --rates ${RATES:-4,8,16,24} --requests 200 \
    --checkpoint $CK --out $OUT/goodput_qwen3_tts_ttfa.json > $OUT/goodput_edf.log 2>&1
tail -9 $OUT/goodput_edf.log
timeout ${FIFO_S:-130} python3 bench/goodput.py --family qwen3_tts --policies fifo --rates ${FIFO_RATES:-8,16} --requests 200 \
    --checkpoint $CK --out $OUT/goodput_qwen3_tts_ttfa_fifo.json > $OUT/goodput_fifo.log 2>&1
tail -6 $OUT/goodput_fifo.log
