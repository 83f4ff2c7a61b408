"""Build llama.cpp's `llama-server` and `llama-speculative` once, from the llama.cpp source that
the llama-cpp-python sdist vendors, and cache both binaries side by side.

    python -m specaudit.cli llama-server build [--version V] [--sdist FILE] [--jobs N]

Why this source: the in-process `llama-cpp` engine runs the same llama.cpp revision, so the two
engines audit one llama.cpp. One cmake tree builds both targets (`llama-speculative` is the
`examples/speculative` program, for `--engines llama-speculative`); the binaries are linked statically (BUILD_SHARED_LIBS=OFF) so that it
can be copied out of the build tree, and built portable (GGML_NATIVE=OFF). It is cached as
`<cache>/llama-server/<version>/{llama-server,llama-speculative}` with a stamp file written last
that lists them, so a killed build leaves nothing that looks finished; a lock file keeps two builds
from racing. A second call with both binaries in place returns at once; a cache from before
`llama-speculative` was built (its stamp lists no binaries) is rebuilt whole.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from specaudit.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Iterator

# The version checked here (issue 29) when llama-cpp-python is not installed; otherwise the
# installed binding's version, so both llama.cpp engines are one revision.
FALLBACK_VERSION = "0.3.36"
BINARY = "llama-server"
SPECULATIVE = "llama-speculative"
BINARIES = (BINARY, SPECULATIVE)  # one cmake tree, one build, both cached
# The environment variable that names a binary built elsewhere instead of the cached one.
OVERRIDES = {BINARY: "SPECAUDIT_LLAMA_SERVER", SPECULATIVE: "SPECAUDIT_LLAMA_SPECULATIVE"}
STAMP = "specaudit-build.json"
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DGGML_NATIVE=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=ON",  # configures examples/; only the two targets above are compiled
    "-DLLAMA_BUILD_SERVER=ON",
    "-DGGML_OPENMP=OFF",  # llama-server's threads only: OpenMP workers spin on a shared machine
)


def binding_version() -> str:
    """The llama-cpp-python version whose vendored llama.cpp is built: the installed one, else FALLBACK_VERSION."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:
        return FALLBACK_VERSION


def build_root() -> Path:
    from specaudit.models._loading import cache_root

    return cache_root() / "llama-server"


def _stamped(folder: Path) -> list[str] | None:
    """The binaries the stamp in `folder` records (a stamp from before the list: llama-server only), or None without a stamp."""
    try:
        stamp = json.loads((folder / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return list(stamp.get("binaries", [BINARY])) if isinstance(stamp, dict) else None


def cached_binary(version: str | None = None, name: str = BINARY) -> Path | None:
    """The finished binary `name` for `version` (default: binding_version()), or None when it is not built."""
    folder = build_root() / (version or binding_version())
    binary, stamped = folder / name, _stamped(folder)
    if binary.is_file() and os.access(binary, os.X_OK) and stamped is not None and name in stamped:
        return binary
    return None


def _complete(version: str) -> bool:
    return all(cached_binary(version, name) is not None for name in BINARIES)


def find_binary(name: str = BINARY) -> Path | None:
    """The binary `name` to run: the one its environment variable names (OVERRIDES) if set, else the cached build."""
    variable = OVERRIDES[name]
    named = os.environ.get(variable)
    if named:
        path = Path(named).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise InputError(f"{variable}={named!r} is not an executable file")
        return path
    return cached_binary(name=name)


def require_binary(name: str = BINARY) -> Path:
    binary = find_binary(name)
    if binary is None:
        raise InputError(
            f"{name} is not built for llama-cpp-python {binding_version()}; build it once with "
            f"`specaudit llama-server build` (~9 CPU-minutes, docs/llama-cpp.md) or set {OVERRIDES[name]} to a binary"
        )
    return binary


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(command: list[str], log: Path, what: str, cwd: Path | None = None) -> None:
    """Run one build step under `nice -n 19`, its output appended to `log`; a failure is one sentence."""
    program = command[0]
    if shutil.which("nice"):
        command = ["nice", "-n", "19", *command]
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(command)}\n")
        out.flush()
        try:
            done = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False)
        except FileNotFoundError:
            raise InputError(f"cannot build llama-server: {program} is not installed ({what})") from None
    if done.returncode != 0:
        raise InputError(f"cannot build llama-server: {what} failed with exit status {done.returncode}; its output is in {log}")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise InputError(f"cannot build llama-server: `{name}` is not on PATH (install cmake and a C++ compiler)")
    return path


def _download_sdist(version: str, into: Path, log: Path) -> Path:
    _run(
        [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "--dest", str(into), f"llama-cpp-python=={version}"],
        log,
        f"downloading the llama-cpp-python {version} sdist",
    )
    found = sorted(into.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        raise InputError(f"cannot build llama-server: pip saved no llama-cpp-python {version} sdist in {into}")
    return found[0]


def _unpack(sdist: Path, into: Path) -> Path:
    """The sdist's vendor/llama.cpp folder, unpacked under `into`."""
    try:
        with tarfile.open(sdist) as archive:
            archive.extractall(into, filter="data")
    except (tarfile.TarError, OSError) as err:
        raise InputError(f"cannot build llama-server: {sdist} is not a readable sdist ({err})") from None
    found = [path for path in into.glob("*/vendor/llama.cpp") if (path / "CMakeLists.txt").is_file()]
    if not found:
        raise InputError(f"cannot build llama-server: {sdist} has no vendor/llama.cpp with a CMakeLists.txt")
    return found[0]


def build(version: str | None = None, sdist: Path | None = None, jobs: int = 2, quiet: bool = False) -> Path:
    """The cached llama-server binary, built first with llama-speculative beside it if either is not there (idempotent)."""
    version = version or binding_version()
    say = (lambda _: None) if quiet else (lambda text: print(f"specaudit: {text}", file=sys.stderr))
    if _complete(version):
        say(f"llama-server and llama-speculative {version} are built: {build_root() / version}")
        return build_root() / version / BINARY
    if sdist is not None and not Path(sdist).is_file():
        raise InputError(f"--sdist {str(sdist)!r} is not a file")
    cmake = _tool("cmake")
    root = build_root()
    folder = root / version
    with _locked(root):
        if _complete(version):  # another process may have finished it while we waited
            return folder / BINARY
        root.mkdir(parents=True, exist_ok=True)
        log = root / f"build-{version}.log"
        log.write_text("")
        started = time.monotonic()
        work = Path(tempfile.mkdtemp(prefix=f".build-{version}-", dir=root))
        try:
            if sdist is None:
                say(f"downloading the llama-cpp-python {version} sdist (log: {log})")
                sdist = _download_sdist(version, work, log)
            source = _unpack(Path(sdist), work / "src")
            tree = work / "build"
            say(f"building {' and '.join(BINARIES)} from {sdist.name}'s vendor/llama.cpp with {jobs} jobs (~9 CPU-minutes; log: {log})")
            _run([cmake, "-S", str(source), "-B", str(tree), *CMAKE_OPTIONS], log, "cmake configure")
            _run([cmake, "--build", str(tree), "--target", *BINARIES, f"-j{jobs}"], log, "cmake --build")
            for name in BINARIES:
                if not (tree / "bin" / name).is_file():
                    raise InputError(f"cannot build llama-server: the build finished without {tree / 'bin' / name}; its output is in {log}")
            staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=root))
            for name in BINARIES:
                shutil.copy2(tree / "bin" / name, staging / name)
            stamp = {
                "llama_cpp_python": version,
                "sdist": Path(sdist).name,
                "binaries": list(BINARIES),
                "cmake_options": list(CMAKE_OPTIONS),
                "build_s": round(time.monotonic() - started, 1),
            }
            (staging / STAMP).write_text(json.dumps(stamp, indent=2))
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(staging, folder)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    say(f"{' and '.join(BINARIES)} {version} built in {time.monotonic() - started:.0f} s: {folder / BINARY}")
    return folder / BINARY


def build_info(binary: Path) -> dict:
    """The stamp of a cached build (empty for a binary named by SPECAUDIT_LLAMA_SERVER)."""
    stamp = binary.parent / STAMP
    try:
        return json.loads(stamp.read_text())
    except (OSError, ValueError):
        return {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specaudit.engines.llama_build", description=__doc__.splitlines()[0])
    parser.add_argument("--version", default=None, help="llama-cpp-python version whose sources to build (default: the installed one)")
    parser.add_argument("--sdist", type=Path, default=None, help="an already downloaded llama-cpp-python sdist (.tar.gz)")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        print(build(args.version, args.sdist, args.jobs))
    except InputError as err:
        print(f"specaudit: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
