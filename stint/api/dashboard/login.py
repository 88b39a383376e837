"""How a browser signs in to the dashboard with an API key, and stays signed in.

The login form posts the key; once it verifies, the key itself is kept in a
cookie: ``HttpOnly`` (page scripts, and so an injected script, cannot read
it), ``SameSite=Strict`` (no other site's page can make the browser send it),
``Path=/dashboard`` (never sent to /v1), ``Secure`` over HTTPS, and no expiry
(it ends with the browser session, or at logout). Nothing is stored on the
server: every request verifies the key again, so revoking it (`stint keys
revoke`) signs the browser out at its next click.

Every form that writes also carries a CSRF token derived from the key
(HMAC-SHA256 of a fixed label under the key's digest): a page of another
origin cannot know it, so it cannot forge an answer or a cancel even where a
browser would send the cookie.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Annotated
from urllib.parse import quote

from fastapi import Depends, Request

from stint.api.services import Services, services
from stint.store.keys import Caller

__all__ = [
    "COOKIE",
    "COOKIE_PATH",
    "Browser",
    "LoginRequired",
    "NotAllowed",
    "SignedIn",
    "browser",
    "csrf_token",
    "csrf_valid",
    "login_location",
]

COOKIE = "stint_dashboard"
COOKIE_PATH = "/dashboard"


class LoginRequired(Exception):
    """No valid key in the cookie: the browser is sent to the login page."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


class NotAllowed(Exception):
    """The key is valid but may not do this (a tenant's key on an operator page,
    a read-only key writing, a form without its CSRF token)."""


def csrf_token(token: str) -> str:
    key = hashlib.sha256(token.encode()).digest()
    return hmac.new(key, b"stint-dashboard-csrf", hashlib.sha256).hexdigest()


def csrf_valid(token: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(csrf_token(token), given)


class Browser:
    """A signed-in browser: the caller its key proves, and the key's CSRF token."""

    def __init__(self, caller: Caller, token: str) -> None:
        self.caller = caller
        self.csrf = csrf_token(token)
        self._token = token

    @property
    def scope(self) -> str | None:
        """The tenant every read is filtered by; None for an operator (every tenant)."""
        return self.caller.scope

    def check_csrf(self, given: str | None) -> None:
        if not csrf_valid(self._token, given):
            raise NotAllowed("the form is stale or not from this dashboard: reload and retry")

    def require_operator(self) -> None:
        if not self.caller.operator:
            raise NotAllowed("this page needs an operator key (stint keys create --operator)")

    def require_writer(self) -> None:
        if self.caller.read_only:
            raise NotAllowed("this API key is read-only")


async def browser(request: Request, svc: Annotated[Services, Depends(services)]) -> Browser:
    token = request.cookies.get(COOKIE)
    caller = await svc.keys.keys_verify(token=token) if token else None
    if caller is None or token is None:
        path = request.url.path
        raise LoginRequired(path if request.method == "GET" else COOKIE_PATH + "/")
    return Browser(caller, token)


def login_location(next_path: str) -> str:
    return f"{COOKIE_PATH}/login?next={quote(next_path, safe='/')}"


SignedIn = Annotated[Browser, Depends(browser)]
