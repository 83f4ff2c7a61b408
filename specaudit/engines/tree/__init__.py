"""`--engines tree`: specaudit's token-tree speculative sampling (specaudit.decoding.tree), decoded in
this process by the local executor (engines.beyond_chains); this folder holds its settings."""
