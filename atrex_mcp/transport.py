"""The streamable HTTP transport with its guards: a bearer token on every request (compared in
constant time), Host and Origin checks against DNS rebinding, loopback by default.

HTTP exists for the strong benchmark setup: the server (holding the hidden files) runs as
another user or on another host, and the agent reaches it only through the tools.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl

from atrex_mcp.errors import AtrexError

if TYPE_CHECKING:  # the server (and torch behind it) loads only once the settings passed
    from starlette.applications import Starlette

    from atrex_mcp.server import ServerConfig

MIN_TOKEN_CHARS = 16
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


@dataclass
class HttpSettings:
    host: str = "127.0.0.1"
    port: int = 8765
    token: str = field(default="", repr=False)
    allowed_hosts: list[str] = field(default_factory=list)  # names clients use to reach a non-loopback server
    path: str = "/mcp"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_settings(http: HttpSettings) -> None:
    """Refuse a setup that would expose the server: no token, a weak one, or a wildcard bind
    whose Host names are unknown."""
    where = "on loopback" if is_loopback(http.host) else f"on the non-loopback address {http.host!r}"
    if not http.token:
        raise AtrexError("input", "http_needs_token", f"Refusing to serve HTTP {where} without a bearer token.",
                         "Export a long random secret in an environment variable and pass --token-env VAR "
                         "(clients send 'Authorization: Bearer <secret>').")
    if len(http.token) < MIN_TOKEN_CHARS:
        raise AtrexError("input", "weak_token", f"The bearer token has fewer than {MIN_TOKEN_CHARS} characters.",
                         "Use e.g. `python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`.")
    if http.host in WILDCARD_HOSTS and not http.allowed_hosts:
        raise AtrexError("input", "http_needs_allowed_host", f"Binding to {http.host!r} needs the names clients will use.",
                         "Pass --allowed-host NAME (e.g. the machine's DNS name or IP) for each, or bind to one address with --host.")


class StaticTokenVerifier(TokenVerifier):
    """Accepts exactly one secret, compared in constant time."""

    def __init__(self, token: str):
        self._token = token.encode()

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode(), self._token):
            return AccessToken(token="static", client_id="atrex-client", scopes=[])
        return None


def transport_security(http: HttpSettings) -> TransportSecuritySettings:
    """Host/Origin allow-lists: the bound address, the names given, and the loopback names on loopback."""
    names = list(http.allowed_hosts)
    if http.host not in WILDCARD_HOSTS:
        names.append(f"[{http.host}]" if ":" in http.host else http.host)
    if is_loopback(http.host):
        names += ["127.0.0.1", "localhost", "[::1]"]
    names = list(dict.fromkeys(names))
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[form for n in names for form in (n, f"{n}:*")],
        allowed_origins=[form for n in names for scheme in ("http", "https") for form in (f"{scheme}://{n}", f"{scheme}://{n}:*")],
    )


def build_http_app(config: ServerConfig, http: HttpSettings) -> Starlette:
    """The ASGI app: the tools behind the token check and the Host/Origin guard."""
    from atrex_mcp.server import build_server

    check_settings(http)
    name = http.allowed_hosts[0] if http.host in WILDCARD_HOSTS else (f"[{http.host}]" if ":" in http.host else http.host)
    base = f"http://{name}:{http.port}"
    auth = AuthSettings(issuer_url=AnyHttpUrl(base), resource_server_url=None, validate_token_resource=False)
    server = build_server(config, token_verifier=StaticTokenVerifier(http.token), auth=auth)
    return server.streamable_http_app(streamable_http_path=http.path, host=http.host,
                                      transport_security=transport_security(http))


def serve_http(config: ServerConfig, http: HttpSettings) -> None:
    import uvicorn

    app = build_http_app(config, http)
    logging.getLogger(__name__).info("serving MCP over HTTP at http://%s:%d%s (bearer token required)", http.host, http.port, http.path)
    # log_config=None: uvicorn logs through the root handlers, which carry benchmark-mode redaction.
    uvicorn.run(app, host=http.host, port=http.port, log_config=None, log_level="warning")
