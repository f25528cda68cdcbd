"""Files the app writes for one browser session, and their removal when the session ends.

The attention view's downloads (PNG maps, JSON), the Transcribe tab's transcript files
(SRT, VTT, TXT, JSON: transcript_files.py) and the Live tab's transcript are written
to one folder per browser session; Gradio serves its own copies of them (its cache,
cleaned by `delete_cache`, see ui/__init__.py). The folder itself is ours: it goes when
the tab closes.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Sequence

import gradio as gr

ATTENTION_ROOT = "whisper-kv-attention"


def attention_folder(session_hash: Optional[str]) -> Optional[Path]:
    """The session's folder for attention downloads; None for no session or a hash that is
    not a plain name (the client picks it: it must never reach outside the root)."""
    if not session_hash or not session_hash.isalnum():
        return None
    return Path(tempfile.gettempdir()) / ATTENTION_ROOT / session_hash


def run_folder(session_hash: Optional[str], part: str) -> Optional[Path]:
    """A subfolder of the session's folder for one kind of download ("attention",
    "transcript"), emptied: each run replaces the files of the one before (Gradio serves
    its own copies). None without a session."""
    folder = attention_folder(session_hash)
    if folder is None:
        return None
    folder = folder / part
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def live_transcript_file(session_hash: Optional[str], text: str) -> Optional[Path]:
    """The Live tab's final text as a .txt in the session's folder (None: no folder, or no
    text). One file per recording, named by when it stopped."""
    folder = attention_folder(session_hash)
    if folder is None or not text.strip():
        return None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / time.strftime("live-transcript-%Y%m%d-%H%M%S.txt")
    path.write_text(text.strip() + "\n", encoding="utf-8")
    return path


def live_subtitle_files(session_hash: Optional[str], timed_words: Sequence) -> List[Path]:
    """The Live tab's final text as SRT and VTT subtitles in the session's folder, one cue
    per sentence or pause (transcript_files.utterances_from_words), from its final words
    with their stream times (anything with .text, .start, .end: live.words.TimedWord).
    [] without a session or words. Named by when the recording stopped, as the .txt."""
    from ..transcript_files import utterances_from_words, utterances_result, write_transcript

    folder = attention_folder(session_hash)
    if folder is None or not timed_words:
        return []
    paths = write_transcript(utterances_result(utterances_from_words(timed_words)), folder,
                             time.strftime("live-transcript-%Y%m%d-%H%M%S"), formats=("srt", "vtt"))
    return list(paths.values())


def remove_session_files(request: gr.Request) -> None:
    """Gradio's unload event: the tab is gone, and so are the files written for it."""
    folder = attention_folder(getattr(request, "session_hash", None))
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
