"""The streamable HTTP transport with its guards: a bearer token on every request (compared in
constant time), Host and Origin checks against DNS rebinding, loopback by default, and no
wildcard bind without the Host names clients will use.

Each token is one client: runs and profiles belong to the token that made them, so two agents
given two tokens never see each other's runs (`client_id`); a stdio server has one client,
LOCAL_CLIENT (atrex_mcp.runs.store).

HTTP exists for the strong benchmark setup: the server (holding the hidden files) runs as
another user or on another host, and the agent reaches it only through the tools.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl

from atrex_mcp.errors import AtrexError

if TYPE_CHECKING:  # the server (and torch behind it) loads only once the settings passed
    from starlette.applications import Starlette

    from atrex_mcp.server.app import ServerConfig

MIN_TOKEN_CHARS = 16


@dataclass
class HttpSettings:
    host: str = "127.0.0.1"
    port: int = 8765
    token: str = field(default="", repr=False)
    more_tokens: list[str] = field(default_factory=list, repr=False)  # one per further client
    allowed_hosts: list[str] = field(default_factory=list)  # names clients use to reach a non-loopback server
    path: str = "/mcp"

    @property
    def tokens(self) -> list[str]:
        return [self.token, *self.more_tokens]


def _numeric_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a numeric host names as the socket layer reads it ('0', '0x0', '0.0' and
    '127.1' included, which inet_aton accepts), or None for a name."""
    bare = host.strip().removeprefix("[").removesuffix("]")
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(bare))
    except OSError:
        return None


def is_wildcard(host: str) -> bool:
    """Does binding to `host` listen on every interface ('', '0', '0.0.0.0', '::', '::0', '[::]' …)?"""
    if not host.strip():
        return True
    address = _numeric_address(host)
    return address is not None and address.is_unspecified


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    address = _numeric_address(host)
    return address is not None and address.is_loopback


def client_id(token: str) -> str:
    """A token's client identity: stable across restarts, and not the secret itself."""
    return "token-" + hashlib.sha256(token.encode()).hexdigest()[:16]


def check_settings(http: HttpSettings) -> None:
    """Refuse a setup that would expose the server: no token, a weak one, or a wildcard bind
    whose Host names are unknown."""
    where = "on loopback" if is_loopback(http.host) else f"on the non-loopback address {http.host!r}"
    if not all(http.tokens):
        raise AtrexError(
            "input",
            "http_needs_token",
            f"Refusing to serve HTTP {where} without a bearer token.",
            "Export a long random secret in an environment variable and pass --token-env VAR "
            "(clients send 'Authorization: Bearer <secret>').",
        )
    if any(len(token) < MIN_TOKEN_CHARS for token in http.tokens):
        raise AtrexError(
            "input",
            "weak_token",
            f"The bearer token has fewer than {MIN_TOKEN_CHARS} characters.",
            "Use e.g. `python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`.",
        )
    if len(set(http.tokens)) != len(http.tokens):
        raise AtrexError(
            "input",
            "duplicate_token",
            "Two --token-env variables hold the same token.",
            "Give each client its own token: runs belong to the token that started them.",
        )
    if is_wildcard(http.host) and not http.allowed_hosts:
        raise AtrexError(
            "input",
            "http_needs_allowed_host",
            f"Binding to {http.host!r} listens on every interface and needs the names clients will use.",
            "Pass --allowed-host NAME (e.g. the machine's DNS name or IP) for each, or bind to one address with "
            "--host.",
        )


class StaticTokenVerifier(TokenVerifier):
    """Accepts the configured secrets, each compared in constant time; each is its own client."""

    def __init__(self, tokens: str | list[str]):
        self._tokens = [(t.encode(), client_id(t)) for t in ([tokens] if isinstance(tokens, str) else tokens)]

    async def verify_token(self, token: str) -> AccessToken | None:
        found = None
        for secret, identity in self._tokens:  # every secret is compared, so timing tells nothing
            if hmac.compare_digest(token.encode(), secret):
                found = identity
        return AccessToken(token="static", client_id=found, scopes=[]) if found else None


def transport_security(http: HttpSettings) -> TransportSecuritySettings:
    """Host/Origin allow-lists: the bound address, the names given, and the loopback names on loopback."""
    names = list(http.allowed_hosts)
    if not is_wildcard(http.host):
        names.append(f"[{http.host}]" if ":" in http.host else http.host)
    if is_loopback(http.host):
        names += ["127.0.0.1", "localhost", "[::1]"]
    names = list(dict.fromkeys(names))
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[form for n in names for form in (n, f"{n}:*")],
        allowed_origins=[
            form for n in names for scheme in ("http", "https") for form in (f"{scheme}://{n}", f"{scheme}://{n}:*")
        ],
    )


def build_http_app(config: ServerConfig, http: HttpSettings) -> Starlette:
    """The ASGI app: the tools behind the token check and the Host/Origin guard."""
    from atrex_mcp.server.app import build_server

    check_settings(http)
    name = http.allowed_hosts[0] if is_wildcard(http.host) else (f"[{http.host}]" if ":" in http.host else http.host)
    base = f"http://{name}:{http.port}"
    auth = AuthSettings(issuer_url=AnyHttpUrl(base), resource_server_url=None, validate_token_resource=False)
    server = build_server(config, token_verifier=StaticTokenVerifier(http.tokens), auth=auth)
    return server.streamable_http_app(
        streamable_http_path=http.path, host=http.host, transport_security=transport_security(http)
    )


def serve_http(config: ServerConfig, http: HttpSettings) -> None:
    import uvicorn

    app = build_http_app(config, http)
    logging.getLogger(__name__).info(
        "serving MCP over HTTP at http://%s:%d%s (bearer token required)", http.host, http.port, http.path
    )
    # log_config=None: uvicorn logs through the root handlers, which carry benchmark-mode redaction.
    uvicorn.run(app, host=http.host, port=http.port, log_config=None, log_level="warning")
