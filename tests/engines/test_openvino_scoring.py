"""OpenVINO runs are scored with the IR at its exact form: f32, and no dynamic quantisation of
activations (which the CPU plugin applies at f32 too unless told not to, and which moved tokens at
the edge of a top-p nucleus across it: docs/openvino.md, finding 8)."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("openvino_genai") is None, reason="openvino-genai is not installed (pip install specaudit[openvino])"
)


@pytest.mark.slow
def test_the_scoring_target_runs_at_f32_without_dynamic_quantisation():
    from specaudit.engines.openvino.client import ir_folder
    from specaudit.engines.openvino.scoring import OpenVinoLogits
    from specaudit.models._cache import file_sha256
    from specaudit.models._loading import embedded_gguf_path

    gguf = embedded_gguf_path()
    folder = ir_folder(gguf, file_sha256(gguf), {"INFERENCE_NUM_THREADS": 1}).folder
    target = OpenVinoLogits(folder)
    assert target.properties["DYNAMIC_QUANTIZATION_GROUP_SIZE"] == "0"
    assert "f32" in target.properties["INFERENCE_PRECISION_HINT"] or "float32" in target.properties["INFERENCE_PRECISION_HINT"]
    logits = target.sequence_logits([1, 4093, 198, 19161, 253, 8216])
    assert logits.shape == (6, target.vocab_size) and float(abs(logits).max()) > 0
