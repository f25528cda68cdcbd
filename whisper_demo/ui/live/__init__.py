"""The Live tab: its layout (layout.py), its handlers (tab.py composes the sessions both
microphones share, sessions.py, with each microphone's: ../microphone/browser_mic.py and
desktop_mic.py) and one browser tab's live state (tab_session.py). The live transcription
itself is whisper_demo/live/."""
