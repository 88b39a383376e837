"""Deployment tests: manifests (no engine needed) and real containers (a Docker engine).

Tests marked ``docker`` need an engine that answers (``DOCKER_HOST``; see
``deploy/dockerd.sh``) and Stint's images (``deploy/build-images.sh``). Without
them they are skipped and say why; ``STINT_REQUIRE_DOCKER=1`` (set by ``.ci/run``)
turns that skip into a failure, so a green CI run is evidence they ran.
"""

from __future__ import annotations

import functools
import os

import pytest
from _pytest.nodes import Item

from stint.lab.container import CONTAINER_IMAGE, container_unavailable
from tests.deploy import engine

REQUIRE_ENV = "STINT_REQUIRE_DOCKER"


@functools.cache
def _missing() -> str | None:
    """Why container tests cannot run here, or None."""
    reason = container_unavailable()
    if reason is not None:
        return reason
    absent = [i for i in (engine.WORKER_IMAGE, CONTAINER_IMAGE) if not engine.image_exists(i)]
    if absent:
        return f"images not built: {', '.join(absent)} (deploy/build-images.sh)"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: Item) -> None:
    if item.get_closest_marker("docker") is None:
        return
    reason = _missing()
    if reason is None:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but container tests cannot run: {reason}")
    pytest.skip(f"container tests not run: {reason}; {REQUIRE_ENV}=1 makes this a failure")
