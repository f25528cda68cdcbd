"""The Starlette route the Live tab's page posts its microphone to (given to Gradio's app
at launch): POST /live-audio/{ticket}?at=N&rate=R[&end=1] (mic_stream.py says what it
carries and what it may do).

In this order, so that a refused request costs the server nothing: the ticket is looked
up and its one place for a request in flight taken, without waiting (410 unknown or
ended, 409 busy); the declared size is checked (413); the body is read, never more than
the limit; only then is it handed to a thread to be checked and fed.
"""

from __future__ import annotations

from .mic_stream import ROUTE, MicStreams


def audio_route(streams: MicStreams):
    """The route for `streams` (the Live tab's browser recordings)."""
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def read_body(request, stream, limit: int):
        """The body, or the 413 reply once it is over `limit` (never more in memory)."""
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return None, streams.too_large(stream, int(declared))
        body = bytearray()
        async for part in request.stream():
            body += part
            if len(body) > limit:
                return None, streams.too_large(stream, len(body))
        return bytes(body), None

    async def live_audio(request):
        arrived = streams.clock()  # fed on a thread: its arrival is now
        stream, reply = streams.admit(request.path_params["ticket"])
        if stream is not None:
            try:
                body, reply = await read_body(request, stream, streams.limits.max_chunk_bytes)
                if reply is None:
                    query = request.query_params
                    reply = await run_in_threadpool(streams.take, stream, query.get("at"), query.get("rate"),
                                                    body, query.get("end") == "1", arrived)
            finally:
                streams.release(stream)
        status, content = reply
        return JSONResponse(content, status_code=status)

    return Route(ROUTE, live_audio, methods=["POST"])
