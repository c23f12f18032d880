#!/usr/bin/env bash
# One H200, .whl carried: the Qwen3-TTS codec graphs' GPU test, then bench/goodput.py on a random
# full-size Qwen3-TTS with the codec in slots and graphs (edf):  bash bench/h200_qwen_codec.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 40 python3 -m pytest -q -p no:warnings -p no:cacheprovider tests/models/test_qwen3_tts_codec_graphs_gpu.py > $OUT/gpu_tests.log 2>&1
tail -3 $OUT/gpu_tests.log
timeout ${GOODPUT_S:-200} python3 bench/goodput.py --family qwen3_tts --policies ${POLICIES:-edf} --rates ${RATES:-8,16,24,32} \
    --requests 200 --out $OUT/goodput_qwen3_tts_codec.json > $OUT/goodput.log 2>&1
tail -12 $OUT/goodput.log
