"""The deployment gate's parts; `specaudit.gate` is its public face (`evaluate_gate`)."""
