"""whisper-kv: watch Whisper's decoder KV cache at work, token by token."""
