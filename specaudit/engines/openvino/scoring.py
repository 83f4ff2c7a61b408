"""Scoring an OpenVINO run with OpenVINO's own target: the IR its pipelines loaded, teacher-forced
by the OpenVINO runtime at f32 without dynamic quantisation (the model's exact form; the run's
precision is in its manifest).

Why not specaudit's torch copy of the same GGUF: OpenVINO's reading of the embedded Q4_1 file is
another model (docs/openvino.md: TV 0.69 between the two first-token distributions of one prompt),
so judging OpenVINO's speculative outputs against the torch model would fail its plain decoding as
much as its speculation. Scored with its own target, the vanilla control checks the runtime's plain
decoding and the speculative engine is judged against the model it was meant to sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from specaudit.engines.external_logits import ExternalLogits, ScoringPair
from specaudit.errors import InputError

if TYPE_CHECKING:
    import numpy as np

SCORING_PRECISION = "f32"
# The exact form: f32 arithmetic, and no on-the-fly int8 quantisation of activations, which the CPU
# plugin applies to compressed-weight layers (groups of 32) even at f32 unless told not to; with it
# on, a token at the edge of a top-p nucleus moved across it (docs/openvino.md, finding 8)
SCORING_PROPERTIES = {"INFERENCE_PRECISION_HINT": SCORING_PRECISION, "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}


class OpenVinoLogits(ExternalLogits):
    """An IR as a scoring model: `model(input_ids=..., attention_mask=...).logits`, each row
    evaluated alone in one call from an empty state (the IR is stateful: its KV cache is reset)."""

    def __init__(self, folder: Path, *, threads: int = 1) -> None:
        import openvino as ov

        compiled = ov.Core().compile_model(
            str(folder / "openvino_model.xml"), "CPU", {**SCORING_PROPERTIES, "INFERENCE_NUM_THREADS": threads}
        )
        self.properties = {name: str(compiled.get_property(name)) for name in SCORING_PROPERTIES}
        self.request = compiled.create_infer_request()
        self.output = compiled.outputs[0]
        self.inputs = {name for port in compiled.inputs for name in port.get_names()}
        self.vocab_size = int(compiled.outputs[0].get_partial_shape()[-1].get_length())

    def sequence_logits(self, ids: list[int]) -> np.ndarray:
        """[len(ids), V] float32 logits, position t predicting token t + 1."""
        import numpy as np

        n = len(ids)
        feed = {
            "input_ids": np.asarray([ids], dtype=np.int64),
            "attention_mask": np.ones((1, n), dtype=np.int64),
            "position_ids": np.arange(n, dtype=np.int64)[None],
            "beam_idx": np.zeros(1, dtype=np.int32),
        }
        self.request.reset_state()
        result = self.request.infer({name: value for name, value in feed.items() if name in self.inputs})
        return np.array(result[self.output][0], dtype=np.float32, copy=True)


def run_ir(manifest: dict) -> Path:
    """The target IR folder an OpenVINO run loaded (converted again from its GGUF if the cache lost it)."""
    target = (manifest.get("models") or {}).get("target") or {}
    folder = Path(str(target.get("ir") or ""))
    if (folder / "openvino_model.xml").is_file():
        return folder
    if target.get("gguf") and Path(target["gguf"]).is_file():
        from specaudit.engines.openvino.client import ir_folder

        return ir_folder(Path(target["gguf"]), str(target.get("gguf_sha256")), {}).folder
    raise InputError(f"the run's target IR {str(folder)!r} is gone and its GGUF with it; re-run the audit to score it")


def scoring_pair(manifest: dict, device: str | None = None) -> Any:
    """The scoring pair of an OpenVINO run folder: its target IR and specaudit's tokenizer of the target."""
    import torch

    from specaudit.models import load_tokenizer

    config = manifest.get("config") or {}
    threads = int(((manifest.get("openvino") or {}).get("properties") or {}).get("INFERENCE_NUM_THREADS", 1))
    target = OpenVinoLogits(run_ir(manifest), threads=threads)
    return ScoringPair(
        target=target,
        tokenizer=load_tokenizer(str(config.get("target", "default"))),
        vocab_size=target.vocab_size,
        device=torch.device("cpu"),
    )


__all__ = ["OpenVinoLogits", "scoring_pair"]
