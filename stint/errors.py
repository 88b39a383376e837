"""The root of the errors Stint raises on purpose.

Every tree of Stint's errors (the store's ``StoreError``, ``SettingsError``, the
agents harness's ``AgentError``, the worker's harness and health errors, the
lab's ``LoadError`` ...) hangs under ``StintError``, so a caller embedding
Stint can tell Stint's refusals and failures (``except StintError``) from a bug
(``TypeError`` and the like). It imports nothing: every package may use it.
"""

from __future__ import annotations

__all__ = ["StintError"]


class StintError(Exception):
    """Stint refused something or could not do it; the message says what."""
