"""How a browser signs in to the dashboard with an API key, and stays signed in.

The login form posts the key; once it verifies, it is exchanged for a
server-side session (``stint.store.dashboard_sessions``: revocable,
expiring, only a digest stored) and the cookie holds the session's token,
never the key: ``HttpOnly`` (page scripts, and so an injected script, cannot
read it), ``SameSite=Strict`` (no other site's page can make the browser send
it), ``Path=/dashboard`` (never sent to /v1), ``Secure`` over HTTPS and, by
default, whenever the API listens beyond loopback (issue 22: it depended on
an undocumented proxy-headers setting). Every request checks the session and
its key, so signing out, the session's expiry, or revoking the key (`stint
keys revoke`) signs the browser out at its next click.

Login CSRF (issue 22: another site's page could post its own key to
/dashboard/login and the victim would work in the attacker's tenant): the
sign-in form carries a token that must match a cookie set with the form
(double submit: another site can neither read nor set it), and a sign-in
whose ``Origin`` is another origin is refused.

Every form that writes also carries a CSRF token derived from the session
(HMAC-SHA256 of a fixed label under the session token's digest): a page of
another origin cannot know it, so it cannot forge an answer or a cancel even
where a browser would send the cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from typing import Annotated
from urllib.parse import quote

from fastapi import Depends, Request

from stint.api.services import Services, services
from stint.config.settings import Settings
from stint.store.keys import Caller

__all__ = [
    "COOKIE",
    "COOKIE_PATH",
    "LOGIN_COOKIE",
    "Browser",
    "LoginRequired",
    "NotAllowed",
    "SignedIn",
    "browser",
    "cookie_secure",
    "csrf_token",
    "csrf_valid",
    "login_allowed",
    "login_location",
    "new_login_token",
]

COOKIE = "stint_dashboard"
COOKIE_PATH = "/dashboard"
LOGIN_COOKIE = "stint_login"


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
    """A signed-in browser: the caller its session proves, and the session's CSRF token."""

    def __init__(self, caller: Caller, token: str) -> None:
        self.caller = caller
        self.csrf = csrf_token(token)
        self.token = token
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
    caller = await svc.dashboard_sessions.sessions_verify(token=token) if token else None
    if caller is None or token is None:
        path = request.url.path
        raise LoginRequired(path if request.method == "GET" else COOKIE_PATH + "/")
    return Browser(caller, token)


def new_login_token() -> str:
    return secrets.token_urlsafe(32)


def login_allowed(request: Request, given: str | None) -> bool:
    """A sign-in posted by this dashboard's own form: its token matches the cookie
    set with the form, and its Origin, when the browser sends one, is this origin."""
    expected = request.cookies.get(LOGIN_COOKIE)
    if not expected or given is None or not hmac.compare_digest(expected, given):
        return False
    origin = request.headers.get("origin")
    own = f"{request.url.scheme}://{request.headers.get('host', '')}"
    return origin is None or origin == own


def cookie_secure(settings: Settings, scheme: str) -> bool:
    """``Secure`` over HTTPS, and whenever the API listens beyond loopback (a TLS
    proxy in front is then assumed), unless STINT_DASHBOARD_INSECURE_COOKIE."""
    if scheme == "https":
        return True
    if settings.dashboard_insecure_cookie:
        return False
    return not _loopback(settings.api_host)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def login_location(next_path: str) -> str:
    return f"{COOKIE_PATH}/login?next={quote(next_path, safe='/')}"


SignedIn = Annotated[Browser, Depends(browser)]
