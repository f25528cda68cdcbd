"""options.decode_options: the one place where a user's choices become DecodeOptions."""

from dataclasses import fields

import pytest

from whisper_demo.events import DecodeOptions
from whisper_demo.options import RANDOM_SEED, decode_options, effective_mode, seed_field

# A value for every field, each different from DecodeOptions' default.
NON_DEFAULT = dict(cache="off", beam_size=3, precision="int8", language="de", task="translate",
                   timestamps=False, prompt="earlier words", condition_on_previous_text=False,
                   temperature_fallback=False, no_speech_threshold=0.3,
                   carry_initial_prompt=True, compression_ratio_threshold=2.0, logprob_threshold=-0.5,
                   clip_timestamps=(1.0, 5.0), hallucination_silence_threshold=2.0,
                   seed=7, skip_digital_silence=True, no_speech_before_decoding=True,
                   reset_prompt_after_silence=True, detect_language_from_window=True,
                   max_tokens_per_window=50, single_window=True, word_timestamps=True, word_probabilities=True, draft_tokens=(50364, 440),
                   prefix_tokens=(50364, 1002),
                   attention=True, encode_audio_only=True, fallback_keeps_best=True, batch_size=8)


def test_the_table_names_every_field():
    assert set(NON_DEFAULT) == {f.name for f in fields(DecodeOptions)}


def test_every_field_not_chosen_survives():
    base = DecodeOptions(**NON_DEFAULT)
    assert decode_options(base) == base
    for f in fields(DecodeOptions):
        other = decode_options(base, **{f.name: getattr(DecodeOptions(), f.name)})
        for g in fields(DecodeOptions):
            if g.name not in (f.name, "precision"):  # precision: only the hooks rule may touch it
                assert getattr(other, g.name) == getattr(base, g.name), (f.name, g.name)


def test_every_field_can_be_chosen():
    chosen = decode_options(DecodeOptions(), **NON_DEFAULT)
    assert chosen == DecodeOptions(**NON_DEFAULT)


def test_the_page_choices():
    base = DecodeOptions(**NON_DEFAULT)
    page = decode_options(base, cache_on=True, mode="static", beam_size="2", language="auto",
                          timestamps=True)
    assert (page.cache, page.beam_size, page.language, page.timestamps) == ("static", 2, None, True)
    assert page.prompt == "earlier words" and not page.temperature_fallback  # the rest survives
    assert decode_options(base, language="fr", multilingual=False).language is None
    assert decode_options(base, cache_on=False, mode="hooks").cache == "off"


def test_int8_with_hooks_runs_exact_in_every_caller():
    base = DecodeOptions(precision="int8")
    assert decode_options(base, cache_on=True, mode="hooks").precision == "exact"
    assert decode_options(DecodeOptions(), cache="hooks", precision="int8").precision == "exact"
    assert decode_options(base, cache_on=True, mode="static").precision == "int8"


def test_refusals_are_value_errors():
    with pytest.raises(ValueError):
        decode_options(DecodeOptions(), beam_size=0)
    with pytest.raises(ValueError):
        decode_options(DecodeOptions(), beam=2)  # not a field


def test_cache_switch_and_mode_agree():
    assert effective_mode(False, "static") == "off"
    assert effective_mode(False, "hooks") == "off"
    assert effective_mode(True, "hooks") == "hooks"
    assert effective_mode(True, "off") == "static"  # ticking the box turns a cache on


def test_a_seed_is_a_whole_number_or_random():
    assert DecodeOptions().seed == 0  # the same audio, the same words, unless asked otherwise
    unseeded = DecodeOptions(seed=None)
    assert decode_options(DecodeOptions(), seed="random").seed is None  # --seed random
    assert decode_options(DecodeOptions(), seed=RANDOM_SEED).seed is None  # the page's field
    assert decode_options(unseeded, seed=7.0).seed == 7 and decode_options(unseeded, seed=" 3 ").seed == 3
    assert decode_options(unseeded, beam_size=2).seed is None  # not chosen: kept
    for bad in (1.5, "seven", 2 ** 64):
        with pytest.raises(ValueError):
            decode_options(DecodeOptions(), seed=bad)
    assert (seed_field(None), seed_field(0), seed_field(5)) == (RANDOM_SEED, 0, 5)
