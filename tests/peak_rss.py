"""Peak RSS of a probe process, for the memory tests that run a probe with `python -c`.

getrusage's ru_maxrss keeps the parent's high-water mark across exec, so under a test worker of
several GB it hides any growth; /proc/self/status's VmHWM is this process's own, and writing "5"
to /proc/self/clear_refs resets it to the current RSS (Linux)."""

PEAK_RSS = """
import re as _re

def peak_rss():
    with open("/proc/self/status") as status:
        return int(_re.search(r"VmHWM:\\s+(\\d+)", status.read()).group(1)) * 1024

def reset_peak_rss():
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
"""
