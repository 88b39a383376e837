"""/healthz (the process answers) and /readyz (its database answers and every
migration this code knows is applied): unauthenticated, for orchestrators."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from stint.api.schemas import Health, Readiness
from stint.api.services import Services, services
from stint.store.errors import MigrationError, StoreError
from stint.store.migrate import migrations_pending

__all__ = ["router"]

router = APIRouter()


@router.get("/healthz", response_model=Health, summary="The process is up")
async def healthz() -> Health:
    return Health()


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"description": "Not ready: why is in detail", "model": Readiness}},
    summary="The database answers and its migrations are current",
)
async def readyz(svc: Annotated[Services, Depends(services)]) -> JSONResponse:
    listening = svc.hub.listening.is_set()
    try:
        pending = await migrations_pending(svc.config, svc.pool)
    except MigrationError as exc:  # the database answered, with migrations we do not know
        state = Readiness(
            ready=False, database=True, pending_migrations=[], listening=listening, detail=str(exc)
        )
    except StoreError as exc:
        state = Readiness(
            ready=False,
            database=False,
            pending_migrations=[],
            listening=listening,
            detail=str(exc),
        )
    else:
        state = Readiness(
            ready=not pending,
            database=True,
            pending_migrations=pending,
            listening=listening,
            detail="ready" if not pending else "migrations pending: run stint migrate",
        )
    return JSONResponse(state.model_dump(), status_code=200 if state.ready else 503)
