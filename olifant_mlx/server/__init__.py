"""An OpenAI-compatible HTTP server on the Session API (`python -m olifant_mlx serve`).

`config` (limits, the bind and API-key rule, named drafters; no web stack), `queue` (the
worker thread that owns the Session, its bounded FIFO, usage), `schemas` (request bodies,
checks, response and error bodies), `app` (the ASGI app, its guard, uvicorn). The web stack is
the optional `[server]` extra; see docs/server.md.
"""
