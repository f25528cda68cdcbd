"""Language detection on the multilingual base model: speech in German, Spanish
and Italian, synthesised by espeak-ng at test time, is detected as that language ("auto",
the page's default) and transcribed in it.

Measured with base, greedy: es word error rate 0, de 0.29, it 0.50 (espeak-ng's voices
are robotic; the bounds leave room for that, not for a wrong language or English text).
"""

import shutil
import subprocess

import pytest
from whisper.normalizers import BasicTextNormalizer

from whisper_demo.audio import load_audio
from whisper_demo.decode import transcribe
from whisper_demo.events import DecodeOptions

SPEECH = {
    "de": ("Guten Morgen. Heute ist das Wetter schön, und wir gehen in den Park spazieren.", 0.5),
    "es": ("Buenos días. Hoy hace buen tiempo y vamos a pasear por el parque.", 0.2),
    "it": ("Buongiorno a tutti. Oggi il tempo è bello e andiamo a fare una passeggiata nel parco.", 0.65),
}


def word_error_rate(hypothesis: str, reference: str) -> float:
    """Levenshtein distance over words after openai-whisper's basic (any language)
    normaliser, written out here so the test does not lean on the code it checks."""
    normalise = BasicTextNormalizer()
    hyp, ref = normalise(hypothesis).split(), normalise(reference).split()
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1] / len(ref)


@pytest.fixture(scope="module")
def base_model():
    from whisper_demo.models import load_model

    return load_model("base", device="cpu", progress=False)


@pytest.fixture(scope="module")
def spoken(tmp_path_factory):
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed (apt-get install espeak-ng)")  # a failure in CI
    folder = tmp_path_factory.mktemp("espeak")
    paths = {}
    for lang, (text, _) in SPEECH.items():
        paths[lang] = folder / f"{lang}.wav"
        subprocess.run(["espeak-ng", "-v", lang, "-w", str(paths[lang]), text], check=True,
                       capture_output=True)
    return paths


@pytest.mark.parametrize("lang", list(SPEECH))
def test_auto_detects_the_language_and_transcribes_in_it(base_model, spoken, lang):
    text, bound = SPEECH[lang]
    result = transcribe(base_model, load_audio(spoken[lang]), DecodeOptions(language=None))
    assert result.language == lang, (result.language, result.text)
    wer = word_error_rate(result.text, text)
    print(f"\n{lang}: {result.text!r} (WER {wer:.2f})")
    assert wer <= bound, (wer, result.text)


def test_the_page_auto_language_reaches_the_decoder(base_model, spoken):
    """Through the page's handler with its default "auto": the panel names the language."""
    from whisper_demo.ui import Defaults, ModelStore, build_app

    store = ModelStore(device="cpu")
    store.put("base", base_model)
    app = build_app(store, Defaults(model="base"))
    fn = next(f.fn for f in app.fns.values() if f.api_name == "transcribe_page")
    updates = list(fn(str(spoken["es"]), True, "static", 1, "auto", True, "base", None))
    assert "buenos días" in updates[-1][0].lower()
    assert " · es" in updates[-1][1]
    # a language chosen by hand is used as given (German asked of Spanish speech)
    forced = transcribe(base_model, load_audio(spoken["es"]), DecodeOptions(language="de"))
    assert forced.language == "de"


def test_readme_model_table_states_base_parameters(base_model):
    from pathlib import Path

    from test_claims import whisper_parameter_count

    counted = whisper_parameter_count(base_model.dims)
    assert counted == sum(p.numel() for p in base_model.parameters())
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `base`"))
    assert f"| {counted / 1e6:.1f} M |" in row, row


@pytest.mark.parametrize("lang", list(SPEECH))
def test_a_shorter_encoder_input_detects_the_language_as_a_whole_window_does(base_model, spoken, lang):
    # The live streamed pass encodes the buffer's audio only (encode_audio_only): openai-whisper's
    # detect_language took those features for a log-mel and failed ("expected 80 channels").
    audio = load_audio(spoken[lang])
    short = transcribe(base_model, audio, DecodeOptions(encode_audio_only=True, detect_language_from_window=True))
    whole = transcribe(base_model, audio, DecodeOptions(detect_language_from_window=True))
    assert short.language == whole.language == lang
