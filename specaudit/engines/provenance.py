"""Where a run ran, for its manifest: the CPU's model name and the specaudit source's commit.

A speed verdict is the machine's, so the report names the machine (`platform.machine()` says
only "x86_64"); a report's figures are the code's, so the run records the commit it ran."""

from __future__ import annotations

import subprocess
from pathlib import Path


def cpu_model() -> str | None:
    """The CPU's model name from /proc/cpuinfo (Linux), or None where it cannot be read."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware", "processor\t: ")) and ":" in line:
                name = line.split(":", 1)[1].strip()
                if name and not name.isdigit():
                    return name
    except OSError:
        return None
    return None


def source_commit() -> str | None:
    """`git describe --always --dirty` of the specaudit checkout the run used; None for an
    installed wheel (no .git beside the package) or without git."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty", "--tags"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None
