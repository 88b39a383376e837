"""One root error: every error class Stint raises on purpose derives from StintError."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import stint
from stint.errors import StintError

# Not errors: HTTP answers and sign-in redirects inside the API, a ValueError
# pydantic turns into a 422, and the signals that unwind a harness when its turn
# parks or is handed back for quota (the runner catches them; no caller sees one).
_NOT_ERRORS = {
    "ApiProblem",
    "LoginRequired",
    "NotAllowed",
    "JsonRefused",
    "Parked",
    "Deferred",
    "Waiting",
}


def test_every_public_exception_class_derives_from_stint_error() -> None:
    strays = []
    for module in pkgutil.walk_packages(stint.__path__, "stint."):
        if module.name.endswith("__main__"):
            continue
        loaded = importlib.import_module(module.name)
        for name, value in vars(loaded).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.name
                and not name.startswith("_")
                and name not in _NOT_ERRORS
                and not issubclass(value, StintError)
            ):
                strays.append(f"{module.name}.{name}")
    assert not strays, f"error classes outside the StintError tree: {strays}"
