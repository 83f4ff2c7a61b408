"""`--sampling` settings: parsing, labels, and the bug classes each setting cannot show."""

from types import SimpleNamespace

import pytest

from specaudit.decoding import SamplingSpec
from specaudit.decoding.settings import BUG_CLASSES, blind_spot_sentence, blind_spots, parse_setting, parse_settings, setting_label
from specaudit.errors import InputError


@pytest.mark.parametrize(
    ("text", "spec", "label"),
    [
        ("greedy", SamplingSpec(0.0), "greedy"),
        ("t=0.7,top_p=0.9", SamplingSpec(0.7, 0, 0.9), "t=0.7,top_p=0.9"),
        ("T=1, top-k=50", SamplingSpec(1.0, 50, 1.0), "t=1,top_k=50"),
        ("temperature=1", SamplingSpec(), "t=1"),
    ],
)
def test_settings_parse_and_label_round_trip(text, spec, label):
    assert parse_setting(text) == spec
    assert setting_label(spec) == label
    assert parse_setting(label) == spec


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("t=0.7,top_q=0.9", "'top_q' is not a sampling setting; did you mean top_p\\?"),
        ("t=0.7,zzz=0.9", "'zzz=0.9' is not key=value with a key of frequency_penalty, grammar, logit_bias"),
        ("t=1,min_p=1.5", "min_p must be in \\[0, 1\\)"),
        ("t=1,repetition_penalty=0", "repetition_penalty must be a number > 0"),
        ("t=1,logit_bias=42", "logit_bias must be ID:BIAS pairs"),
        ("t=1,logit_bias=x:1", "logit_bias must be ID:BIAS pairs"),
        ("t=1,repeat_last_n=-3", "repeat_last_n must be >= 0"),
        ("t=1,repeat_last_n=2.5", "repeat_last_n must be an integer"),
        ("t=hot", "t must be a number, got 'hot'"),
        ("top_k=2.5", "top_k must be an integer"),
        ("t=1,t=0.5", "sets temperature twice"),
        ("top_p=1.5", "top-p must be in \\(0, 1\\]"),
    ],
)
def test_bad_settings_name_what_is_wrong(text, message):
    with pytest.raises(InputError, match=message):
        parse_setting(text)


@pytest.mark.parametrize(
    ("text", "spec", "label"),
    [
        (
            "t=0.7,top_p=0.9,repetition_penalty=1.2",
            SamplingSpec(0.7, 0, 0.9, repetition_penalty=1.2),
            "t=0.7,top_p=0.9,repetition_penalty=1.2",
        ),
        (
            "t=1,presence_penalty=0.5,frequency_penalty=0.5",
            SamplingSpec(presence_penalty=0.5, frequency_penalty=0.5),
            "t=1,presence_penalty=0.5,frequency_penalty=0.5",
        ),
        ("t=1,min_p=0.1", SamplingSpec(min_p=0.1), "t=1,min_p=0.1"),
        ("t=1,logit_bias=42:-5;7:2.5", SamplingSpec(logit_bias=((7, 2.5), (42, -5.0))), "t=1,logit_bias=7:2.5;42:-5"),
        ("t=1,stop=\\n\\n|END\\,", SamplingSpec(stop=("\n\n", "END,")), "t=1,stop=\\n\\n|END\\,"),
        (
            "greedy,repeat_penalty=1.1,repeat_last_n=64",
            SamplingSpec(0.0, repetition_penalty=1.1, repeat_last_n=64),
            "greedy,repetition_penalty=1.1,repeat_last_n=64",
        ),
    ],
)
def test_request_features_parse_and_label_round_trip(text, spec, label):
    assert parse_setting(text) == spec
    assert setting_label(spec) == label
    assert parse_setting(label) == spec
    assert SamplingSpec.from_dict(spec.to_dict()) == spec


def test_records_without_request_features_keep_their_sampling_dict():
    assert SamplingSpec(0.7, 0, 0.9).to_dict() == {"temperature": 0.7, "top_k": 0, "top_p": 0.9}
    assert SamplingSpec(min_p=0.1).to_dict() == {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.1}


def test_a_logit_bias_list_continues_across_semicolons():
    specs = parse_settings("t=1,logit_bias=42:-5;7:2; greedy; t=1,min_p=0.1")
    assert [setting_label(s) for s in specs] == ["t=1,logit_bias=7:2;42:-5", "greedy", "t=1,min_p=0.1"]


def test_several_settings_and_repeats():
    assert [setting_label(s) for s in parse_settings("greedy; t=0.7,top_p=0.9")] == ["greedy", "t=0.7,top_p=0.9"]
    with pytest.raises(InputError, match="repeats the setting t=1"):
        parse_settings(["t=1", "temperature=1.0"])
    with pytest.raises(InputError, match="names no setting"):
        parse_settings([])


def test_blind_spots_follow_what_warping_does():
    names = lambda spec: {c.name for c in blind_spots(spec)}  # noqa: E731
    # T = 1 without truncation: warped == raw, so warping mix-ups cannot show; sampling ones can.
    assert names(SamplingSpec()) == {"one-sided warping", "q before truncation"}
    assert names(SamplingSpec(0.7)) == {"q before truncation"}  # temperature alone truncates nothing
    assert names(SamplingSpec(0.7, 0, 0.9)) == set() and names(SamplingSpec(1.0, 50)) == set()
    assert names(SamplingSpec(0.0)) == {
        "q before truncation",
        "greedy draft, soft q",
        "verification silently greedy",
        "randomised acceptance rule",
    }
    assert blind_spot_sentence(SamplingSpec(0.7, 0, 0.9)) is None
    sentence = blind_spot_sentence(SamplingSpec())
    assert sentence.startswith("Sampling: tested at t=1 only") and "transformers #47932" in sentence and "vLLM #9834" in sentence
    assert all(c.reports and c.mutant for c in BUG_CLASSES)


def test_request_feature_classes_show_where_the_setting_uses_their_feature():
    from specaudit.contracts.snapshot import RunConfigBlock
    from specaudit.decoding.settings import FEATURE_CLASSES
    from specaudit.report.view.sampling import sampling_view

    shown = lambda spec: {c.name for c in FEATURE_CLASSES if c.visible(spec)}  # noqa: E731
    sampled = {"seed ignored when speculating", "logprobs of a step's later tokens"}
    assert shown(SamplingSpec(0.7, 0, 0.9)) == sampled
    assert shown(SamplingSpec(0.0)) == set()
    assert shown(parse_setting("t=1,repetition_penalty=1.3")) == sampled | {"penalties on the speculative path"}
    assert shown(parse_setting("t=1,min_p=0.1")) == sampled | {"min-p and logit bias on the bonus token only"}
    assert "min-p and logit bias on the bonus token only" in shown(parse_setting("greedy,logit_bias=42:-5"))
    assert "min-p and logit bias on the bonus token only" not in shown(parse_setting("greedy,min_p=0.1"))
    assert shown(parse_setting("t=1,stop=END")) == sampled | {"tokens after a stop string"}
    # the banner's sentence names only the core classes; the report's table lists both
    assert blind_spot_sentence(SamplingSpec(0.7, 0, 0.9)) is None
    # the view reads only the run's config of the typed snapshot
    config = RunConfigBlock.model_validate({"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.1})
    run = SimpleNamespace(run=SimpleNamespace(config=config))
    view = sampling_view(run)
    rows = {row["class"]: row["visible"] for row in view.rows}
    assert len(rows) == len(BUG_CLASSES) + len(FEATURE_CLASSES)
    assert rows["min-p and logit bias on the bonus token only"] and not rows["tokens after a stop string"]
