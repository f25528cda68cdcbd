"""The HTTP API a program uses (README, "Command line"): gradio_client against `python
app.py`, reading /transcribe's named outputs (text, segments, language, figures) and
/compare's, as the "Use via API" page describes them."""

import pytest

from app_server import running_app
from page_client import PageClient
from whisper_demo.examples import EXAMPLES_DIR as DATA

SHORT = DATA / "short_3s.wav"


@pytest.fixture(scope="module")
def server():
    with running_app() as app:
        yield app


@pytest.fixture(scope="module")
def client(server):
    from gradio_client import Client

    return Client(server.url, verbose=False)


def test_the_api_page_names_the_outputs(client):
    info = client.view_api(return_format="dict", print_info=False)
    named = info["named_endpoints"]
    assert [r["label"] for r in named["/transcribe"]["returns"]] == ["text", "segments", "language", "figures"]
    assert [r["label"] for r in named["/compare"]["returns"]] == [
        "text", "cached_figures", "uncached_figures", "identical_tokens"]
    params = {p["parameter_name"]: p for p in named["/transcribe"]["parameters"]}
    assert list(params)[:7] == ["audio", "cache_on", "mode", "beam", "language", "timestamps", "model_name"]
    assert params["beam"]["python_type"]["type"] in ("float", "int")  # a number, not a string
    # the page's own streaming events are not offered to programs
    assert not any(name.endswith("_page") for name in named)


def test_transcribe_returns_text_segments_language_and_figures(server, client):
    from gradio_client import handle_file

    text, segments, language, figures = client.predict(
        handle_file(str(SHORT)), True, "static", 1, "auto", True, "tiny.en", api_name="/transcribe")
    assert "close the door" in text.lower()
    assert language == "en"
    assert segments and all(0 <= s["start"] < s["end"] <= 3.5 for s in segments)
    assert " ".join(s["text"].strip() for s in segments) == text.strip()
    assert figures["cache_mode"] == "static" and figures["decoder_steps"] == len(figures["step_ms"]) > 5
    assert figures["peak_self_cache_bytes"] > 0 and figures["peak_cross_cache_bytes"] > 0
    # the same text as the page shows for the same clip and choices
    page = PageClient(server.url)
    done = page.call("run_btn", "click", first=page.upload(SHORT), timeout=240)
    assert done.error is None, done.error
    assert done.outputs[0] == text
    # with word timestamps, by name: each segment's words, timed
    result = client.predict(audio=handle_file(str(SHORT)), beam=1, word_timestamps=True, api_name="/transcribe")
    words = [w for s in result[1] for w in s["words"]]
    assert [w["word"].strip() for w in words][:3] == ["Please", "close", "the"]
    assert all(0 <= w["start"] <= w["end"] <= 3.5 for w in words)


def test_compare_and_a_bad_file(client, tmp_path):
    from gradio_client import handle_file

    text, cached, uncached, identical = client.predict(
        handle_file(str(SHORT)), True, "static", 1, "auto", True, "tiny.en", api_name="/compare")
    assert "door" in text.lower() and identical is True
    assert (cached["cache_mode"], uncached["cache_mode"]) == ("static", "off")
    fake = tmp_path / "notes.wav"
    fake.write_text("this is not audio\n" * 50)
    with pytest.raises(Exception) as err:
        client.predict(handle_file(str(fake)), True, "static", 1, "auto", True, "tiny.en", api_name="/transcribe")
    assert "That file is not audio: notes.wav" in str(err.value)
    assert "libsndfile" not in str(err.value) and "/tmp" not in str(err.value)
