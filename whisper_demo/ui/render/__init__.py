"""What the page draws, as HTML and SVG strings: pure functions and small classes, no gradio
(the tabs' handlers put their output into gr.HTML). The cache panel (panel.py), the
Transcribe tab's chart, Compare summary, window strip and attention view, the Live tab's
transcript, buffer strip and latency chart; formats.py writes their numbers."""
