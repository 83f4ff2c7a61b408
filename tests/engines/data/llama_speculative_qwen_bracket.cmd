# the command that wrote the .log beside this file (its stderr, from the first verification line on): a draft branch
# holding Qwen's token 2533 "]\n\n", which ended an earlier parser's branch list early; llama-cpp-python 0.3.36's
# vendored llama.cpp, the qwen2.5-coder pair (specaudit models fetch qwen2.5-coder), prompt domain-news-043 of core
llama-speculative -m qwen2.5-coder-1.5b-instruct-q4_k_m.gguf -md qwen2.5-coder-0.5b-instruct-q4_k_m.gguf -p '<|im_start|>system
You are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>
<|im_start|>user
Write a sports report for a fictional under-fourteens football final.<|im_end|>
<|im_start|>assistant
' -n 24 --seed 1391550879 --samplers 'top_k;top_p;temperature' --temp 1 --top-k 0 --top-p 1 --min-p 0 --typical 1 --repeat-penalty 1 --repeat-last-n 0 --presence-penalty 0 --frequency-penalty 0 --dry-multiplier 0 --xtc-probability 0 --top-n-sigma -1 --mirostat 0 --dynatemp-range 0 --spec-draft-n-max 4 -np 1 --draft-p-split 0.1 -c 2048 -t 1 -tb 1 -td 1 -lv 5
