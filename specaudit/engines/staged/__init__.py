"""`--engines staged`: specaudit's staged speculative sampling (specaudit.decoding.staged), decoded in
this process by the local executor (engines.beyond_chains); this folder holds its settings."""
