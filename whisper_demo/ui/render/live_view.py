"""What the Live tab shows of a session: the transcript, the buffer strip over the stats
tiles (live_strip.py: the audio the last re-decode read, what is committed of it and where
the model was reading), the cache panel and the latency chart (latency_svg.py), rendered
as HTML from the worker's immutable
LiveView. A timer redraws them (ui/live/sessions.py), skipping what did not change since
it was last sent. No gradio here.
"""

from __future__ import annotations

import html
import time
from typing import Iterable, Sequence, Tuple

from ...live import LiveView
from . import panel
from .latency_svg import latency_svg
from .live_strip import strip_html

COMMITTED_STYLE = ""
TENTATIVE_STYLE = "color:#94a3b8;font-style:italic"
IDLE_TEXT = "Press Record and speak: the cache fills here with each re-decode."
# How long the page marks the words a final pass changed (the mark fades over that time)
REVISION_SHOWN_S = 4.0
LIVE_CSS = f"""
/* the downloads sit under the transcript card, as wide as it (the card has the HTML block's 12 px inset) */
#live-download {{ margin: 0 12px; width: auto !important; }}
.wk-revised {{ background: rgba(250, 204, 21, .45); border-radius: 3px; padding: 0 .1em;
  animation: wk-revised-fade {REVISION_SHOWN_S}s ease-in forwards; }}
@keyframes wk-revised-fade {{ to {{ background: transparent; }} }}
#live-mic-status .wk-mic {{ display: flex; align-items: center; gap: .75rem; padding: .45rem .75rem; }}
#live-mic-status .wk-mic-label {{ font-weight: 600; }}
#live-mic-status .wk-mic-text {{ flex: 1; color: var(--body-text-color-subdued); }}
#live-mic-status .wk-mic-meter {{ width: 6rem; height: .45rem; border-radius: 3px; overflow: hidden;
  background: var(--border-color-primary); }}
#live-mic-status .wk-mic-level {{ display: block; height: 100%; width: 0; background: #22c55e; }}
"""


# The words as shown, committed then tentative, to the clipboard. Where the page is not a
# secure context (served to another machine over plain http) the browser has no clipboard
# API: the text is selected instead, for Ctrl+C. Run once by the transcript's gr.HTML
# (js_on_load): its "Copy text" button is part of the transcript's HTML, drawn only when
# there is text, so clicks are delegated to the component's element.
COPY_ON_CLICK_JS = """
const copyTranscript = () => {
  const body = document.querySelector('#live-transcript-body');
  if (!body) return;
  const words = [...body.querySelectorAll('.wk-committed, .wk-tentative')]
    .map(e => e.textContent.trim()).filter(Boolean).join(' ');
  if (!words) return;
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(words);
  } else {
    const range = document.createRange();
    range.selectNodeContents(body);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }
};
element.addEventListener('click', (e) => { if (e.target.closest('#live-copy')) copyTranscript(); });
"""
COPY_BUTTON = ('<button id="live-copy" type="button" class="wk-copy" style="float:right;margin:0 0 .3rem '
               '.6rem;font-size:.8rem;padding:.1rem .5rem;border:1px solid var(--border-color-primary);'
               'border-radius:6px;background:var(--background-fill-secondary);cursor:pointer">Copy text</button>')


def transcript_html(final_words: Sequence[str] = (), streamed: str = "", tentative: str = "", *,
                    done: bool = False, note: str = "", changes: Iterable[Tuple[int, int, str]] = (),
                    revised_ago: float = 0.0) -> str:
    """The transcript: the final words (each utterance's final pass), the words the
    streamed pass committed after them (normal type too: both are `.wk-committed`), the
    tentative ones in grey italics. `changes`: runs of final words (start, end, what the
    page showed there) the last final pass wrote otherwise than the page showed them,
    marked for REVISION_SHOWN_S (`revised_ago`: seconds since, so that a redraw does not
    restart the mark's fading)."""
    if isinstance(final_words, str):
        final_words = final_words.split()
    opens = {start: (end, was) for start, end, was in changes}
    shown, i = [], 0
    while i < len(final_words):
        if i in opens:
            end, was = opens[i]
            title = html.escape(f"the final pass changed this; the page showed: {was}" if was
                                else "the final pass added this")
            run = " ".join(html.escape(w) for w in final_words[i:end])
            shown.append(f'<mark class="wk-revised" title="{title}" style="animation-delay:-{revised_ago:.1f}s">'
                         f'{run}</mark>')
            i = max(end, i + 1)
        else:
            shown.append(html.escape(final_words[i]))
            i += 1
    parts = []
    if shown:
        parts.append(f'<span class="wk-final">{" ".join(shown)}</span>')
    if streamed:
        parts.append(f'<span class="wk-streamed">{html.escape(streamed)}</span>')
    committed_html = f'<span class="wk-committed" style="{COMMITTED_STYLE}">{" ".join(parts)}</span>'
    tentative_html = (f' <span class="wk-tentative" style="{TENTATIVE_STYLE}">{html.escape(tentative)}</span>'
                      if tentative else "")
    if not parts and not tentative:
        body = ('<span style="color:var(--body-text-color-subdued)">'
                f'{html.escape(note or "Press Record and speak: text appears here as you talk.")}</span>')
    else:
        body = COPY_BUTTON + committed_html + tentative_html
    state = "final" if done else "live"
    return (f'<div id="live-transcript-body" data-state="{state}" '
            f'style="font-size:1.15rem;line-height:1.6;min-height:4.5rem;padding:.6rem .8rem;'
            f'border:1px solid var(--border-color-primary);border-radius:8px">{body}</div>')


def revision_marks(view: LiveView, now: float) -> dict:
    """transcript_html's marking arguments for the view's last revision, while it is recent."""
    revision, at = view.revision, view.revised_at
    if revision is None or at is None or now - at > REVISION_SHOWN_S:
        return {}
    changes = [(revision.first + start, revision.first + end, was) for start, end, was in revision.changes]
    return dict(changes=changes, revised_ago=now - at)


def stats_html(view: LiveView, microphone_note: str = "") -> str:
    """Four tiles: a value, one or two plain lines under it, and the details (what a
    specialist would ask about) in the tile's tooltip. microphone_note: what went wrong on
    the way from the page's microphone, if anything (MicStream.note)."""
    s = view.stats
    if s is None:
        return ""

    def ms(v):
        return panel.fmt_ms(v) if v is not None else "—"

    def sec(v):
        return f"{v:.1f} s" if v is not None else "—"

    buffer_notes = []
    if s.lost_seconds > 0:
        buffer_notes.append(f"audio lost {s.lost_seconds:.1f} s (arrived slower than real time)")
    if s.dropped_seconds > 0:
        buffer_notes.append(f"{s.dropped_seconds:.1f} s dropped (decoding slower than speech)")
    buffer_details = ["The audio not yet committed; it is cut after committed sentences and long pauses."]
    if microphone_note:
        buffer_details.append(microphone_note)
    last = []
    if s.last_decode_ms:
        last.append(f"last took {ms(s.last_decode_ms)}")
    decode_details = [f"{s.skipped} skipped (no new speech)."]
    if s.loops:
        decode_details.append(f"{s.loops} repeated themselves and were not used.")
    if s.unprompted:
        decode_details.append("This buffer kept repeating the committed text given as its prompt: "
                              "it is decoded without one until it is cut.")
    if s.last_encoder_ms:
        decode_details.append(f"Last encoder (audio → features): {ms(s.last_encoder_ms)}.")
    if s.last_decode_ms and s.last_cpu_ms is not None:
        # torch decodes on all the process's threads: a decode that got much less CPU than
        # its wall time times the threads waited for the CPU (the browser, other programs)
        decode_details.append(
            f"It took {ms(s.last_decode_ms)} of wall time and {ms(s.last_cpu_ms)} of this process's CPU time "
            f"({s.last_cpu_ms / s.last_decode_ms:.1f} cores' worth of the {torch_threads()} it decodes on): "
            "much less means it waited for the CPU (the browser, another program, other sessions).")
    if s.last_given:
        decode_details.append(f"{s.last_given} tokens of already committed words were given as the start "
                              "of its transcript (prefilled in one pass, not decoded again).")
    if s.last_from_draft:
        passes = "one pass" if s.last_draft_passes == 1 else f"{s.last_draft_passes} passes"
        last.append(f"{s.last_from_draft} of {s.last_tokens} tokens reused from the last guess")
        decode_details.append(f"{s.last_from_draft} of its {s.last_tokens} tokens were the previous "
                              f"decode's guess, checked in {passes} (a draft confirmed from the "
                              "previous hypothesis).")
    tiles = [
        ("Chunk end → first token", ms(s.first_token_ms_median),
         f"median · last {ms(s.last_first_token_ms)}",
         f"From the end of each audio chunk to the first token of the decode that read it. "
         f"Median {ms(s.first_token_ms_median)}, p95 {ms(s.first_token_ms_p95)}, last {ms(s.last_first_token_ms)}."),
        ("Speech → commit", sec(s.commit_s_median), "median, from each word's end",
         f"From the end of each word in the audio to the moment it was committed. "
         f"Median {sec(s.commit_s_median)}, p95 {sec(s.commit_s_p95)}."),
        ("Buffer", f"{s.buffer_seconds:.1f} s",
         " · ".join([f"of {s.audio_seconds:.1f} s heard"] + buffer_notes), " ".join(buffer_details)),
        ("Re-decodes", str(s.decodes), " · ".join(last) or "none yet", " ".join(decode_details)),
        ("Final passes", str(s.final_passes),
         f"{s.revised_words} of {s.streamed_judged} streamed words revised"
         + (f" · {s.rewritten_words} final words written again" if s.rewritten_words else "")
         if s.final_passes else "one per pause",
         "At each pause (and at Stop, or when a long buffer is cut) one decode hears the buffer since its "
         "last cut, as openai-whisper's transcribe decodes a window, and its words become its final text "
         "(a later pass over the same audio may write a final word again: it heard more after it); "
         "the words it wrote otherwise than the page showed are marked for a moment. "
         f"Pause heard → final text: median {sec(s.final_delay_s_median)}, p95 {sec(s.final_delay_s_p95)}; "
         f"last pass {ms(s.last_final_ms)}."),
    ]
    cells = "".join(
        f'<div class="wk-tile" title="{html.escape(details)}"><div class="wk-label">{html.escape(a)}</div>'
        f'<div class="wk-value">{b}</div><div class="wk-sub">{html.escape(c)}</div></div>'
        for a, b, c, details in tiles)
    return f'<div class="wk-panel"><div class="wk-grid">{cells}</div></div>'


def render(session, model, note: str = "") -> tuple:
    """(transcript, strip and stats, panel, chart) HTML for the current state of a
    ui.live.tab_session.TabSession (or None)."""
    if session is None:
        return (transcript_html("", "", note=note), "", panel.panel_html(None, model, status=note or IDLE_TEXT),
                latency_svg({}))
    series = {panel.series_label(mode, beams): values  # copied once: the panel and the chart
              for (mode, beams), values in session.worker.latency_series().items()}
    view = session.worker.view()
    final = session.final
    if final is not None:
        final_words, streamed, tentative = final.final_words, final.streamed, ""
    else:
        final_words, streamed, tentative = view.final_words, view.streamed, view.tentative
    if view.error is not None:
        note = f"Decoding failed: {type(view.error).__name__}: {view.error}"
    event = view.event
    if event is None:
        panel_box = panel.panel_html(None, session.model, status=note or "listening…")
    else:
        pairs = series.get(panel.series_label(event.cache_mode, event.beam_size), [(event.latency_ms, False)])
        status = note or ("done" if final else _decode_status(view))
        encoder_ms = view.stats.last_encoder_ms if view.stats else None
        panel_box = panel.panel_html(event, session.model, latencies_ms=[ms for ms, _ in pairs],
                                     status=status, encoder_ms=encoder_ms)
    # the strip sits in the stats box, right under the transcript: it changes when they do
    # (once per update), not with every token as the transcript does
    strip = strip_html(view.update.buffer if view.update else None, session.policy, final=final is not None)
    marks = revision_marks(view, time.monotonic())
    return (transcript_html(final_words, streamed, tentative, done=final is not None, note=note, **marks),
            strip + stats_html(view, session.mic_stream.note() if session.mic_stream else ""), panel_box,
            latency_svg(series))


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def _decode_status(view: LiveView) -> str:
    """The panel's header line: which re-decode, and what the previous hypothesis saved."""
    s = view.stats
    if s is None:
        return "listening…"
    line = f"re-decode #{s.decodes} · buffer {s.buffer_seconds:.1f} s"
    if s.last_from_draft:
        line += (f" · {s.last_from_draft} tokens reused from the last guess, "
                 f"{s.last_tokens - s.last_from_draft} new")
    return line
