"""The Live tab's browser microphone: the page's recorder (browser_mic.js), Record's and
Stop's handlers (browser_mic.py), the route its audio is posted to (route.py) and the
recordings that audio feeds, with what a ticket may send (mic_stream.py)."""
