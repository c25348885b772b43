"""Bearer tokens scoped to a tenant, for the dashboard (docs/operations.md, "Access scopes").

A request carries its token as ``Authorization: Bearer <token>`` or in the
``ss_dashboard_token`` cookie, which the login URL ``GET /?token=<token>`` sets (HttpOnly,
SameSite=Strict) before redirecting to ``/`` so the token leaves the address bar; the
page's own requests (``fetch``, ``EventSource``) then carry the cookie. Only that login
takes a token in the URL: any other path with ``?token=`` is refused (401), so API
clients never put the credential where URLs go (access logs, proxies, history), and the
access log (:class:`RedactedAccessLogger`) writes paths without their query string.
``/healthz``, ``/metrics`` (counts and timings only) and ``/static/`` are open. A missing
or unknown token is refused with 401, a token of another tenant with 403, both as JSON
saying what to do.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from sessionstream.core.settings import Env

COOKIE = "ss_dashboard_token"
OPEN_PATHS = ("/healthz", "/metrics")
OPEN_PREFIXES = ("/static/",)


@dataclass(frozen=True)
class TokenAuth:
    """The tokens the dashboard accepts (token → tenant) and the tenant it serves."""

    tenant: str
    tokens: Mapping[str, str]

    def scope_of(self, token: str) -> str | None:
        """The tenant ``token`` is scoped to, or None (compared in constant time)."""
        found = None
        for known, tenant in self.tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                found = tenant
        return found


def _token_of(request: web.Request) -> str | None:
    """The header's bearer token, else the login cookie's (never the query string)."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.cookies.get(COOKIE) or None


class RedactedAccessLogger(AbstractAccessLogger):
    """aiohttp's access log without query strings (a login URL carries the token) and
    without request headers: remote, method, path, status, bytes, seconds."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse,
            time: float) -> None:
        self.logger.info('%s "%s %s" %d %s %.3fs', request.remote, request.method,
                         request.path, response.status, response.body_length, time)


def _refuse(status: int, message: str, auth: TokenAuth, path: str) -> web.Response:
    headers = {"WWW-Authenticate": 'Bearer realm="sessionstream"'} if status == 401 else {}
    return web.json_response({"error": message, "tenant": auth.tenant, "path": path},
                             status=status, headers=headers)


def middleware(auth: TokenAuth, refused: Callable[[str], None] | None = None
               ) -> Callable[..., Awaitable[web.StreamResponse]]:
    """The token check; ``refused(reason)`` is told of each refusal (``missing_token``,
    ``unknown_token``, ``other_tenant``, ``token_in_url``: metrics)."""

    def count(reason: str) -> None:
        if refused is not None:
            refused(reason)

    @web.middleware
    async def check(request: web.Request,
                    handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                    ) -> web.StreamResponse:
        path = request.path
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            return await handler(request)
        login = path == "/" and "token" in request.query
        if "token" in request.query and not login:
            count("token_in_url")
            return _refuse(401, "a token is not accepted in the URL here: send "
                                "Authorization: Bearer <token>, or log in once at "
                                "/?token=… (`sessionstream dashboard --login-url`), which "
                                "sets the login cookie", auth, path)
        token = request.query.get("token") if login else _token_of(request)
        if token is None:
            count("missing_token")
            return _refuse(401, "this dashboard needs a token: open the login URL "
                                "`sessionstream dashboard --login-url` prints, or send "
                                "Authorization: Bearer <token> (`sessionstream acl env "
                                "--role reader`)", auth, path)
        scope = auth.scope_of(token)
        if scope is None:
            count("unknown_token")
            return _refuse(401, "the token is not valid for this dashboard: check "
                                f"{Env.DASHBOARD_TOKEN} of the server", auth, path)
        if scope != auth.tenant:
            count("other_tenant")
            return _refuse(403, f"the token is scoped to tenant {scope!r}; this dashboard "
                                f"serves tenant {auth.tenant!r}", auth, path)
        if login:
            # Keep the token out of the address bar and history: a cookie, then the page.
            found = web.HTTPFound("/")
            found.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/")
            raise found
        return await handler(request)

    return check
