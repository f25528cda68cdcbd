"""The systems `bench e2e` times (e2e.py): whisper-kv in both precisions (sequential and
in batches), openai-whisper's
transcribe and faster-whisper (sequential and batched) on the same weights, each a function
from a float32 16 kHz array to its text and the text tokens it wrote."""

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from ..audio import SAMPLE_RATE


BATCH_SIZE = 8
SYSTEMS = {
    "exact": "whisper-kv exact",
    "fast": "whisper-kv fast (int8)",
    "batched": f"whisper-kv batched ({BATCH_SIZE}) exact",
    "batched-fast": f"whisper-kv batched ({BATCH_SIZE}) fast (int8)",
    "openai": "openai-whisper transcribe",
    "fw-int8": "faster-whisper int8 greedy",
    "fw-float32": "faster-whisper float32 greedy",
    "fw-batched-int8": f"faster-whisper batched ({BATCH_SIZE}) int8",
    "fw-batched-float32": f"faster-whisper batched ({BATCH_SIZE}) float32",
}


@dataclass
class Output:
    text: str
    tokens: int  # text tokens written (timestamps and specials not counted)
    step_ms: Optional[float] = None  # whisper-kv: its mean decoder step in this run


# the step benchmark's window (decode_speed): what a step costs with nothing around it
STEP_WINDOW_SECONDS = 30.0


System = Callable[[np.ndarray], Output]


def whisper_kv_systems(model_name: str, wanted: Sequence[str]) -> Dict[str, System]:
    from ..decode import transcribe
    from ..events import DecodeOptions
    from ..models import load_model

    model = load_model(model_name, progress=False)
    eot = _eot(model.is_multilingual)

    def system(precision: str, batch_size: int = 0) -> System:
        # transcribe()'s defaults otherwise
        options = DecodeOptions(precision=precision, language="en", batch_size=batch_size)

        def run(audio: np.ndarray) -> Output:
            result = transcribe(model, audio, options)
            step_ms = float(np.mean(result.latencies_ms)) if result.latencies_ms else None
            return Output(result.text, sum(1 for t in result.tokens if t < eot), step_ms)
        if not batch_size:
            run.step_alone = step_alone(precision)
        return run

    def step_alone(precision: str) -> Callable[[], float]:
        """The step benchmark's step (decode_speed): its clip's first 30 s decoded as one
        window, greedy, without timestamps, prompt or fallback; the mean over its steps."""
        from ..audio import load_audio
        from .data import DEFAULT_AUDIO

        window = load_audio(DEFAULT_AUDIO, max_seconds=None)[: int(STEP_WINDOW_SECONDS * SAMPLE_RATE)]
        options = DecodeOptions(precision=precision, language="en", timestamps=False,
                                no_speech_threshold=1.0, temperature_fallback=False)

        def measure() -> float:
            return float(np.mean(transcribe(model, window, options).latencies_ms))
        return measure
    kinds = {"exact": ("exact", 0), "fast": ("int8", 0), "batched": ("exact", BATCH_SIZE),
             "batched-fast": ("int8", BATCH_SIZE)}
    return {name: system(*kinds[name]) for name in kinds if name in wanted}


def openai_system(model_name: str) -> System:
    import torch
    import whisper

    from ..models import load_model

    model = load_model(model_name, progress=False)  # its own copy: nothing of ours attached
    eot = _eot(model.is_multilingual)

    def run(audio: np.ndarray) -> Output:
        torch.manual_seed(0)  # its fallback samples from torch's generator: the same draws each run
        result = whisper.transcribe(model, audio, fp16=False, language="en", verbose=None)
        return Output(result["text"], sum(1 for s in result["segments"] for t in s["tokens"] if t < eot))
    return run


def faster_whisper_systems(model_name: str, wanted: Sequence[str], threads: int) -> Dict[str, System]:
    import ctranslate2
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    from .ct2_folder import ctranslate2_model_dir

    # model.bin, config.json, tokenizer.json, vocabulary.txt; no preprocessor_config.json:
    # faster-whisper's defaults (80 mel bins) are tiny.en's and base's. Nothing downloaded.
    folder = ctranslate2_model_dir(model_name)
    engines: Dict[str, WhisperModel] = {}
    found = {}
    for name in wanted:
        compute_type = name.rsplit("-", 1)[1]
        if compute_type not in engines:
            engines[compute_type] = WhisperModel(folder, device="cpu", compute_type=compute_type,
                                                 cpu_threads=threads, local_files_only=True)
        engine = engines[compute_type]
        batched = BatchedInferencePipeline(model=engine) if "batched" in name else None
        found[name] = _faster_whisper_run(engine, batched, _eot(engine.model.is_multilingual), ctranslate2)
    return found


def _faster_whisper_run(engine, batched, eot: int, ctranslate2) -> System:
    def run(audio: np.ndarray) -> Output:
        ctranslate2.set_random_seed(0)  # its fallback samples: the same draws each run
        if batched is not None:
            segments, _ = batched.transcribe(audio, language="en", beam_size=1, best_of=1, batch_size=BATCH_SIZE)
        else:
            segments, _ = engine.transcribe(audio, language="en", beam_size=1, best_of=1)
        segments = list(segments)  # the generator does the work
        return Output("".join(s.text for s in segments), sum(1 for s in segments for t in s.tokens if t < eot))
    return run


def _eot(multilingual: bool) -> int:
    import whisper

    return whisper.tokenizer.get_tokenizer(multilingual).eot


def make_systems(names: Sequence[str], model_name: str, threads: int) -> Tuple[Dict[str, System], Dict[str, str]]:
    """The systems asked for that could be set up, and why each other one could not."""
    builders = [
        (("exact", "fast", "batched", "batched-fast"), lambda wanted: whisper_kv_systems(model_name, wanted)),
        (("openai",), lambda wanted: {"openai": openai_system(model_name)}),
        (tuple(n for n in SYSTEMS if n.startswith("fw-")),
         lambda wanted: faster_whisper_systems(model_name, wanted, threads)),
    ]
    systems, missing = {}, {}
    for covered, build in builders:
        wanted = [n for n in names if n in covered]
        if not wanted:
            continue
        try:
            systems.update(build(wanted))
        except Exception as error:  # e.g. faster-whisper not installed, no CTranslate2 model
            missing.update({n: f"{type(error).__name__}: {error}" for n in wanted})
    return {n: systems[n] for n in names if n in systems}, missing
