"""`specaudit models export-openvino`: a named model's optimum-intel export, and runs finding it.

optimum-intel is not a dependency (it pins an older transformers), so the export itself is run
here through stand-in `optimum-cli` scripts that fail or write too little; the tokenizer check runs
on a real tokenizer IR (the embedded model's, which OpenVINO writes when it converts the GGUF).
"""

from __future__ import annotations

import importlib.util
import stat
from pathlib import Path

import pytest

from specaudit.cli import main
from specaudit.errors import InputError

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("openvino_genai") is None, reason="openvino-genai is not installed (pip install specaudit[openvino])"
    ),
    pytest.mark.filterwarnings("ignore::UserWarning"),  # 2-prompt groups: the prompt-set warning is expected
]


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SPECAUDIT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_a_named_model_not_exported_is_one_sentence_naming_the_command(cache):
    from specaudit.engines.openvino.export import named_ir

    assert named_ir("model.gguf", "--target") is None
    with pytest.raises(InputError) as err:
        named_ir("qwen2.5-coder-0.5b", "--draft")
    message = str(err.value)
    assert "specaudit models export-openvino qwen2.5-coder" in message and "\n" not in message
    assert str(cache / "openvino" / "qwen2.5-coder-0.5b-fp16") in message


def test_a_run_naming_the_pair_before_its_export_stops_in_one_sentence(cache, tmp_path, tiny_prompts_file, capsys):
    args = ["run", "--engines", "openvino", "--target", "qwen2.5-coder-1.5b", "--draft", "qwen2.5-coder-0.5b"]
    assert main([*args, "--prompts", str(tiny_prompts_file), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "`specaudit models export-openvino qwen2.5-coder`" in err and len(err.strip().splitlines()) == 1
    assert not (cache / "models").exists()  # nothing fetched for a run that cannot start


def test_an_exported_model_is_found_only_when_complete(cache):
    from specaudit.engines.openvino.export import IR_FILES, exported_ir, named_ir

    folder = cache / "openvino" / "qwen2.5-coder-1.5b-fp16"
    folder.mkdir(parents=True)
    for name in IR_FILES[:-1]:
        (folder / name).write_text("<net/>")
    assert exported_ir("qwen2.5-coder-1.5b") is None  # no detokenizer: not a finished export
    (folder / IR_FILES[-1]).write_text("<net/>")
    assert named_ir("qwen2.5-coder-1.5b", "--target") == folder


def test_a_missing_optimum_cli_is_exit_2_saying_how_to_install_it(cache, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(cache))  # no optimum-cli on it
    assert main(["models", "export-openvino", "qwen2.5-coder"]) == 2
    err = capsys.readouterr().err
    assert "optimum-cli" in err and "pip install 'optimum-intel[openvino]'" in err and "Traceback" not in err
    assert main(["models", "export-openvino", "qwen2.5-coder", "--optimum-cli", str(cache / "nope")]) == 2
    assert "--optimum-cli" in capsys.readouterr().err


def test_a_failed_or_partial_export_leaves_nothing_in_the_cache(cache, tmp_path, monkeypatch):
    from specaudit.engines.openvino import export

    monkeypatch.setattr("specaudit.models._loading.named_hf_folder", lambda name: tmp_path / "hf")
    failing = _script(tmp_path / "failing", "echo 'loading'; echo 'ValueError: no such task' >&2; exit 3")
    with pytest.raises(InputError, match=r"could not export qwen2.5-coder-0.5b \(exit 3\): ValueError: no such task"):
        export.export_named("qwen2.5-coder-0.5b", failing)
    # writes the model but no tokenizer IRs (openvino-tokenizers missing beside optimum-intel)
    partial = _script(tmp_path / "partial", 'for last; do :; done; echo "<net/>" > "$last/openvino_model.xml"')
    with pytest.raises(InputError, match="no openvino_tokenizer.xml, openvino_detokenizer.xml; install openvino-tokenizers"):
        export.export_named("qwen2.5-coder-0.5b", partial)
    assert list((cache / "openvino").iterdir()) == []  # no scratch folder left, no half export


@pytest.mark.slow
def test_the_tokenizer_check_passes_a_matching_ir_and_fails_a_shifted_vocabulary(monkeypatch):
    from specaudit.engines.openvino import export
    from specaudit.engines.openvino.client import ir_folder
    from specaudit.models import load_tokenizer
    from specaudit.models._cache import file_sha256
    from specaudit.models._loading import embedded_gguf_path

    gguf = embedded_gguf_path()
    folder = ir_folder(gguf, file_sha256(gguf), {"INFERENCE_NUM_THREADS": 1}).folder
    assert export.check_tokenizer(folder, "default") > 40  # the probe text's ids, all equal

    class Shifted:  # a tokenizer whose ids are one off: another vocabulary
        def __init__(self) -> None:
            self.inner = load_tokenizer("default")

        def __call__(self, text, **options):
            return {"input_ids": [i + 1 for i in self.inner(text, **options)["input_ids"]]}

    monkeypatch.setattr("specaudit.models.load_tokenizer", lambda name: Shifted())
    with pytest.raises(InputError, match="encodes the probe text otherwise than specaudit's"):
        export.check_tokenizer(folder, "default")
