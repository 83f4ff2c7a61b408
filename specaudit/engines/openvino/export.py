"""A named model as an OpenVINO IR made by optimum-intel (`specaudit models export-openvino NAME`).

OpenVINO's own GGUF loader cannot read the Qwen2.5-Coder pair's Q4_K_M files ("[load_gguf]
gguf_tensor_to_f16 failed"), so those models go through the HF-format copy specaudit already makes
for the torch engines (f32 weights dequantised from the pinned GGUF, `models fetch --for-torch`)
and optimum-intel's offline export (`optimum-cli export openvino`), once, into
`$SPECAUDIT_CACHE/openvino/<name>-fp16/`. A run naming the model (`--target qwen2.5-coder-1.5b`,
`--pair qwen2.5-coder`) then loads that folder.

optimum-intel pins a transformers older than the one specaudit runs with, so it is not a
dependency: the command runs an `optimum-cli` the user installed (on PATH or named with
`--optimum-cli`, usually in a venv of its own). The weights are exported at fp16: the HF copy's f32
values are 4-bit blocks times fp16 scales, which fp16 keeps to within 2^-11 relative, below the
bf16 the CPU plugin computes in by default; int8 would quantise the model a second time (another
model than the one the other engines run), fp32 would double the disk (8.6 GB for the pair).

The export runs in a scratch folder beside its place and is renamed into place only when the model
and both tokenizer IRs are written and the IR tokenizer encodes and decodes like specaudit's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from specaudit.errors import InputError

WEIGHT_FORMAT = "fp16"
IR_FILES = ("openvino_model.xml", "openvino_tokenizer.xml", "openvino_detokenizer.xml")
RECORD = "specaudit-export.json"
INSTALL_HINT = (
    "install optimum-intel in a venv of its own (it pins an older transformers): "
    "python -m venv ~/optimum-venv && ~/optimum-venv/bin/pip install 'optimum-intel[openvino]', "
    "then pass --optimum-cli ~/optimum-venv/bin/optimum-cli"
)
# Code, prose in several scripts, digits and whitespace runs: where two tokenizers would part
VOCABULARY_PROBE = (
    "def mean(xs: list[float]) -> float:\n    return sum(xs) / len(xs)  # 空の場合は?\n"
    "Quelle est la complexité de `sorted`?  Ответ: O(n log n). 12345678 ✓ 🙂\t\n"
)


@dataclass(frozen=True)
class Export:
    """Where a named model's IR is, and what making it cost (seconds None: the cache held it)."""

    name: str
    folder: Path
    seconds: float | None
    tokens_checked: int


def export_folder(name: str) -> Path:
    from specaudit.models._cache import cache_root

    return cache_root() / "openvino" / f"{name}-{WEIGHT_FORMAT}"


def exported_ir(name: str) -> Path | None:
    """The folder of a finished export of named model `name`, or None."""
    folder = export_folder(name)
    return folder if all((folder / file).is_file() for file in IR_FILES) else None


def named_ir(name: str, role: str) -> Path | None:
    """The IR a run uses for `role` (--target / --draft) named `name`: None for a model that is not
    a named one (a GGUF OpenVINO converts itself); an input error for a named model not exported yet."""
    from specaudit.models._named import NAMED_MODELS, NAMED_PAIRS

    if name not in NAMED_MODELS:
        return None
    folder = exported_ir(name)
    if folder is None:
        pair = next((pair for pair, members in NAMED_PAIRS.items() if name in members), name)
        raise InputError(
            f"{role} {name}: OpenVINO cannot read its Q4_K_M GGUF, so it runs from an optimum-intel export that "
            f"{export_folder(name)} does not hold yet; make it once with `specaudit models export-openvino {pair}`"
        )
    return folder


def find_optimum_cli(given: str | None) -> Path:
    if given:
        path = Path(given).expanduser()
        if not path.is_file():
            raise InputError(f"--optimum-cli {given!r}: no such file; {INSTALL_HINT}")
        return path
    found = shutil.which("optimum-cli")
    if found is None:
        raise InputError(f"export-openvino runs optimum-intel's optimum-cli, which is not on PATH; {INSTALL_HINT}")
    return Path(found)


def export_named(name: str, optimum_cli: Path, *, threads: int | None = None) -> Export:
    """Export named model `name` once (its HF-format copy made first if needed) and check it."""
    from specaudit.models._loading import named_hf_folder

    folder = export_folder(name)
    if exported_ir(name) is not None:
        return Export(name, folder, None, check_tokenizer(folder, name))
    source = named_hf_folder(name)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"cannot write the OpenVINO IR cache {folder.parent} ({err.strerror}); set SPECAUDIT_CACHE") from None
    scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    command = [str(optimum_cli), "export", "openvino", "--model", str(source), "--task", "text-generation-with-past"]
    command += ["--weight-format", WEIGHT_FORMAT, str(scratch)]
    started = time.perf_counter()
    try:
        _run(command, name, threads)
        missing = [file for file in IR_FILES if not (scratch / file).is_file()]
        if missing:
            raise InputError(
                f"optimum-cli exported {name} but wrote no {', '.join(missing)}; install openvino-tokenizers beside optimum-intel and retry"
            )
        seconds = round(time.perf_counter() - started, 1)
        checked = check_tokenizer(scratch, name)
        record = {"source": str(source), "command": command[1:-1], "seconds": seconds, "tool": _tool_versions(optimum_cli)}
        (scratch / RECORD).write_text(json.dumps(record, indent=2) + "\n")
        with contextlib.suppress(OSError):  # another process finished first: keep its folder
            scratch.rename(folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Export(name, folder, seconds, checked)


def _run(command: list[str], name: str, threads: int | None) -> None:

    env = dict(os.environ)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    try:
        process = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=env)
    except OSError as err:
        raise InputError(f"cannot start {command[0]} ({err.strerror}); {INSTALL_HINT}") from None
    if process.returncode != 0:
        lines = [line for line in process.stdout.splitlines() if line.strip()]
        raise InputError(f"optimum-cli could not export {name} (exit {process.returncode}): {(lines or ['no output'])[-1][:300]}")


def _tool_versions(optimum_cli: Path) -> dict:
    """optimum-intel's, transformers' and openvino's versions in the environment optimum-cli runs in."""
    python = optimum_cli.parent / "python"
    probe = "import importlib.metadata as m, json; print(json.dumps({p: m.version(p) for p in ('optimum-intel', 'transformers', 'openvino', 'nncf')}))"
    with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
        return json.loads(subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=120, check=True).stdout)
    return {}


def check_tokenizer(folder: Path, name: str) -> int:
    """The exported tokenizer and detokenizer IRs against specaudit's tokenizer of `name` on a
    probe text: the same ids, and the ids decoded to the same text. Returns the ids compared."""
    import numpy as np
    import openvino as ov
    import openvino_tokenizers  # noqa: F401  (registers the tokenizer operations with OpenVINO)

    from specaudit.models import load_tokenizer

    expected = load_tokenizer(name)(VOCABULARY_PROBE, add_special_tokens=False)["input_ids"]
    core = ov.Core()
    encoder = core.compile_model(str(folder / "openvino_tokenizer.xml"), "CPU")
    ids = [int(i) for i in encoder([VOCABULARY_PROBE])["input_ids"][0]]
    if ids != expected:
        first = next((i for i, (a, b) in enumerate(zip(ids, expected)) if a != b), min(len(ids), len(expected)))
        raise InputError(
            f"the exported tokenizer of {name} in {folder} encodes the probe text otherwise than specaudit's "
            f"({len(ids)} vs {len(expected)} ids, first difference at {first}); the export is not usable"
        )
    decoder = core.compile_model(str(folder / "openvino_detokenizer.xml"), "CPU")
    text = str(decoder(np.asarray([ids], dtype=np.int64))["string_output"][0])
    if text != VOCABULARY_PROBE:
        raise InputError(f"the exported detokenizer of {name} in {folder} decodes the probe ids to other text; the export is not usable")
    return len(ids)


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def main_export(names: list[str], optimum_cli: str | None, threads: int | None) -> int:
    """`specaudit models export-openvino NAME...` (a pair name exports both)."""
    from specaudit.models._named import models_to_fetch

    models = models_to_fetch(names)
    cli = find_optimum_cli(optimum_cli)
    for model in models:
        print(f"{model.name}: exporting to OpenVINO IR ({WEIGHT_FORMAT}) with {cli} ...", file=sys.stderr, flush=True)
        done = export_named(model.name, cli, threads=threads)
        how = "already exported" if done.seconds is None else f"exported in {done.seconds:.0f} s"
        print(
            f"{model.name}: {done.folder} ({folder_bytes(done.folder) / 1e9:.2f} GB, {how}; "
            f"tokenizer IR checked on {done.tokens_checked} ids)"
        )
    return 0


__all__ = ["Export", "check_tokenizer", "export_folder", "export_named", "exported_ir", "find_optimum_cli", "main_export", "named_ir"]
