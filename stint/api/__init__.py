"""The HTTP API process: sessions, turns and resumable event streams for
applications, behind API keys scoped to tenants. FastAPI on uvicorn; imports
the store, config and postgres packages only (checked by import-linter)."""
