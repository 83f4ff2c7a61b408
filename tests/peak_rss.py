"""Peak RSS of a probe process, for the memory tests that run a probe with `python -c`.

getrusage's ru_maxrss keeps the parent's high-water mark across exec, so under a test worker of
several GB it hides any growth; /proc/self/status's VmHWM is this process's own, and writing "5"
to /proc/self/clear_refs resets it to the current RSS (Linux)."""

import json
import subprocess
import sys

# Prepended to a probe's code: peak_growth(warm_up, work) is the peak RSS of `work` over the
# peak of `warm_up` (allocator and kernels warmed), each measured from a reset mark.
PEAK_RSS = """
import re as _re

def _peak_rss():
    with open("/proc/self/status") as status:
        return int(_re.search(r"VmHWM:\\s+(\\d+)", status.read()).group(1)) * 1024

def _reset_peak_rss():
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")

def peak_growth(warm_up, work):
    _reset_peak_rss()
    warm_up()
    before = _peak_rss()
    _reset_peak_rss()
    result = work()
    return _peak_rss() - before, result
"""


def run_probe(code: str, mode: str) -> dict:
    """Run a probe in a fresh process and return the JSON object its last line prints."""
    result = subprocess.run([sys.executable, "-c", PEAK_RSS + code, mode], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
