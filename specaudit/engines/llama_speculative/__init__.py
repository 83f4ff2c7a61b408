"""`--engines llama-speculative`: llama.cpp's `speculative` example (tree drafting), one process per record."""
