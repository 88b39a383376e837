"""The web dashboard, served by the API process: server-rendered HTML, a few lines
of hand-written JavaScript (no build step, nothing from a CDN), and the same API
keys and tenant scoping as /v1. See ``login`` for how a browser holds its key."""
