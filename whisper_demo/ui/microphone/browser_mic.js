// whisper-kv: the Live tab's browser microphone (put in the page by whisper_demo/ui/microphone/browser_mic.py).
//
// Records the microphone as it is (no echo cancellation, noise suppression or gain: Whisper
// was trained on unprocessed audio) with an AudioWorklet, as 16-bit PCM at the browser's
// rate, and posts it to the server's /live-audio/{ticket} route (route.py, mic_stream.py): one
// request at a time, each carrying what was recorded while the one before was on its
// way, so the chunks arrive whole and in order, and none is lost while a request waits.
//
//   await whisperKvMic.open()   -> "" or why there is no microphone (Record's first step)
//   whisperKvMic.begin(ticket)  the server's ticket (JSON): start sending
//   await whisperKvMic.stop()   the last chunk sent (Stop's first step)
//   whisperKvMic.cancel()       Record failed on the server: close the microphone
(() => {
  if (window.whisperKvMic) return;

  // Runs on the audio thread: converts each 128-sample render quantum to int16 and hands
  // the main thread a block every 0.1 s (and the rest when asked to flush).
  const WORKLET = `
    class WhisperKvCapture extends AudioWorkletProcessor {
      constructor(options) {
        super();
        this.block = new Int16Array(options.processorOptions.blockSamples);
        this.filled = 0;
        this.peak = 0;
        this.port.onmessage = (event) => {
          if (event.data === "flush") { this.send(); this.port.postMessage({ flushed: true }); }
        };
      }
      send() {
        if (this.filled) this.port.postMessage({ pcm: this.block.slice(0, this.filled), peak: this.peak });
        this.filled = 0;
        this.peak = 0;
      }
      process(inputs) {
        const channels = inputs[0];
        if (!channels || !channels.length) return true;
        for (let i = 0; i < channels[0].length; i++) {
          let v = 0;
          for (const channel of channels) v += channel[i];
          v = Math.max(-1, Math.min(1, v / channels.length));
          this.peak = Math.max(this.peak, Math.abs(v));
          this.block[this.filled++] = Math.round(v < 0 ? v * 32768 : v * 32767);
          if (this.filled === this.block.length) this.send();
        }
        return true;
      }
    }
    registerProcessor("whisper-kv-capture", WhisperKvCapture);
  `;
  const RETRIES = 8;  // a request that fails to reach the server is sent again, this often
  const RETRY_MS = 500;

  const status = () => document.querySelector("#live-mic-status");

  class Microphone {
    constructor() { this.reset(); }

    reset() {
      this.media = null; this.context = null; this.node = null;
      this.ticket = null; this.path = null; this.maxSamples = 0; this.rate = 0;
      this.queue = []; this.queued = 0; this.sent = 0; this.recorded = 0;
      this.sending = false; this.ending = false; this.flushed = false; this.endSent = false;
      this.failed = "";
      this.whenFlushed = null; this.whenSent = null;
    }

    async open() {
      this.close();
      const media = navigator.mediaDevices;
      if (!media || !media.getUserMedia) {
        return "This browser gives the page no microphone here: it allows one only on a secure page " +
               "(http://127.0.0.1 or localhost, or https).";
      }
      try {
        // the recorder is ready before the microphone opens, and connected the moment it
        // does: the first words are not lost while the worklet loads
        this.context = new AudioContext();
        this.rate = this.context.sampleRate;
        const url = URL.createObjectURL(new Blob([WORKLET], { type: "application/javascript" }));
        await this.context.audioWorklet.addModule(url);
        URL.revokeObjectURL(url);
        this.node = new AudioWorkletNode(this.context, "whisper-kv-capture", {
          processorOptions: { blockSamples: Math.round(this.context.sampleRate / 10) } });
        this.node.port.onmessage = (event) => this.fromWorklet(event.data);
        this.node.connect(this.context.destination);  // pulled by the audio graph; it outputs silence
        this.media = await media.getUserMedia({ audio: {
          channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false } });
        this.context.createMediaStreamSource(this.media).connect(this.node);
        await this.context.resume();
      } catch (err) {
        this.close();
        return `The browser gave no microphone: ${err.name || "Error"}: ${err.message || err}`;
      }
      this.show("Recording…", 0);
      return "";
    }

    begin(ticketJson) {
      let ticket = null;
      try { ticket = JSON.parse(ticketJson || "null"); } catch (err) { ticket = null; }
      if (!ticket || !ticket.path || !this.rate) { this.close(); return; }  // no session, or no microphone
      this.path = ticket.path;
      this.maxSamples = Math.max(1, Math.floor(ticket.max_chunk_seconds * this.rate));
      this.ticket = ticket;
      this.pump();
    }

    cancel() { this.close(); this.show("Press Record and speak.", 0); }

    async stop() {
      if (!this.context) return;
      this.ending = true;
      this.whenFlushed = this.whenFlushed || new Promise((resolve) => { this.onFlushed = resolve; });
      this.node.port.postMessage("flush");
      await Promise.race([this.whenFlushed, new Promise((r) => setTimeout(r, 1000))]);
      this.flushed = true;
      this.stopCapture();
      this.whenSent = this.whenSent || new Promise((resolve) => { this.onSent = resolve; });
      this.pump();
      // the server waits for the last chunk too; a page that cannot reach it stops anyway
      await Promise.race([this.whenSent, new Promise((r) => setTimeout(r, 10000))]);
      this.show(this.failed || `Stopped after ${(this.recorded / (this.rate || 1)).toFixed(1)} s. Press Record to start again.`, 0);
    }

    fromWorklet(message) {
      if (message.flushed) { if (this.onFlushed) this.onFlushed(); return; }
      if (!message.pcm || this.flushed) return;
      this.queue.push(message.pcm);
      this.queued += message.pcm.length;
      this.recorded += message.pcm.length;
      if (!this.failed) this.show(`Recording ${(this.recorded / this.rate).toFixed(1)} s`, message.peak);
      this.pump();
    }

    take() {  // up to maxSamples of the queued audio, as one chunk
      const n = Math.min(this.queued, this.maxSamples);
      const chunk = new Int16Array(n);
      let filled = 0;
      while (filled < n) {
        const head = this.queue[0];
        const used = Math.min(head.length, n - filled);
        chunk.set(head.subarray(0, used), filled);
        filled += used;
        if (used === head.length) this.queue.shift(); else this.queue[0] = head.subarray(used);
      }
      this.queued -= n;
      return chunk;
    }

    async pump() {
      if (this.sending || !this.ticket) return;
      this.sending = true;
      try {
        while (!this.failed && (this.queued > 0 || (this.flushed && !this.endSent))) {
          const at = this.sent;
          const chunk = this.take();
          const end = this.flushed && this.queued === 0;
          await this.post(chunk, at, end);
          this.sent = at + chunk.length;
          if (end) this.endSent = true;
        }
      } finally {
        this.sending = false;
      }
      if ((this.endSent || this.failed) && this.onSent) this.onSent();
    }

    async post(chunk, at, end) {
      const root = String((window.gradio_config && window.gradio_config.root) || window.location.href);
      const url = new URL(this.path, root.replace(/\/?$/, "/"));
      url.searchParams.set("at", at);
      url.searchParams.set("rate", this.rate);
      if (end) url.searchParams.set("end", "1");
      for (let attempt = 0; ; attempt++) {
        let reply;
        try {
          reply = await fetch(url, { method: "POST", body: chunk.buffer,
                                     headers: { "Content-Type": "application/octet-stream" } });
        } catch (err) {  // the server was not reached: the same chunk again, a little later
          if (attempt >= RETRIES) return this.fail("The server could not be reached: the recording stopped.");
          await new Promise((r) => setTimeout(r, RETRY_MS));
          continue;
        }
        if (reply.ok) return;
        // 409: an earlier try of this chunk (one that seemed lost) is still being taken
        if (reply.status === 409 && attempt < RETRIES) {
          await new Promise((r) => setTimeout(r, RETRY_MS));
          continue;
        }
        let said = "";
        try { said = (await reply.json()).error || ""; } catch (err) { said = ""; }
        // 400/413/429: this chunk was refused (the server's page warning says why); the rest goes on.
        // 410: the session ended on the server; nothing more can be sent.
        if (reply.status === 410) return this.fail(said || "The recording ended on the server.");
        return;
      }
    }

    fail(message) {
      this.failed = message;
      this.stopCapture();
      this.show(message, 0);
    }

    show(text, peak) {
      const box = status();
      if (!box) return;
      const label = box.querySelector(".wk-mic-text");
      const level = box.querySelector(".wk-mic-level");
      if (label) label.textContent = text;
      if (level) level.style.width = `${Math.round(100 * Math.min(1, peak))}%`;
    }

    stopCapture() {
      if (this.media) this.media.getTracks().forEach((track) => track.stop());
      if (this.context) this.context.close().catch(() => {});
      this.media = null; this.node = null; this.context = null;
    }

    close() {
      this.stopCapture();
      this.reset();
    }
  }

  window.whisperKvMic = new Microphone();
})();
