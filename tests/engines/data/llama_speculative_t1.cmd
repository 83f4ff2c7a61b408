# the command that wrote the .log beside this file (its stderr, from the first verification line on) and the .log.stdout (its stdout);
# llama-speculative of llama-cpp-python 0.3.36's vendored llama.cpp, SmolLM2-135M-Instruct.Q4_1.gguf as target and draft
llama-speculative -m SmolLM2-135M-Instruct.Q4_1.gguf -md SmolLM2-135M-Instruct.Q4_1.gguf -p '<|im_start|>user
Write a short poem about rain.<|im_end|>
<|im_start|>assistant
' -n 12 --seed 1 --samplers 'top_k;top_p;temperature' --temp 1 --top-k 0 --top-p 1 --min-p 0 --typical 1 --repeat-penalty 1 --repeat-last-n 0 --presence-penalty 0 --frequency-penalty 0 --dry-multiplier 0 --xtc-probability 0 --top-n-sigma -1 --mirostat 0 --dynatemp-range 0 --spec-draft-n-max 4 -np 1 --draft-p-split 0.1 -c 2048 -t 1 -tb 1 -td 1 -lv 5
