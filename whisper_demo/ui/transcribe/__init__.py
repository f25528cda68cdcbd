"""The Transcribe tab: its layout (layout.py), its decoding handlers (handlers.py) and
the page's model dropdown (model_switch.py)."""
