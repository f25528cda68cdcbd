"""whisper-kv: watch Whisper's decoder KV cache at work, token by token.

Importing the package changes nothing in the process. The programs that start a process
(app.py, whisper_demo.bench, the tests' conftest.py) set OMP_WAIT_POLICY=PASSIVE before
torch loads; the README's benchmark notes ("Threads") say why.
"""
