"""Where a webhook may be sent: the SSRF guard.

An endpoint URL is chosen by a tenant and fetched from inside the deployment's
network, so before each attempt the host is resolved here and every address it
resolves to must be public (not loopback, private, link-local (cloud metadata),
shared, multicast, reserved or unspecified) unless it lies in an allowed network
(``STINT_WEBHOOK_ALLOWED_NETWORKS``). The request then goes to the address that
was checked, with the URL's host in ``Host`` and in TLS (SNI and certificate
check), so a DNS answer that changes between the check and the connection
cannot move it elsewhere (DNS rebinding).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from stint.errors import StintError

__all__ = ["AddressRefused", "Target", "parse_networks", "resolve_target"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressRefused(StintError):
    """The endpoint's host resolves to an address webhooks may not be sent to."""


@dataclass(frozen=True)
class Target:
    """The URL to connect to (the checked address in place of the host), and the
    original host for ``Host`` and TLS."""

    url: str
    host_header: str
    sni_hostname: str | None


def _public(address: Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


def _allowed(address: Address, networks: Sequence[Network]) -> bool:
    return _public(address) or any(address in network for network in networks)


async def resolve_target(url: str, networks: Sequence[Network]) -> Target:
    """Resolve the URL's host once, refuse it unless every address is allowed, and
    return the request target pinned to the first address."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise AddressRefused(f"cannot resolve the endpoint's host: {exc.strerror}") from None
    addresses: list[Address] = []
    for info in infos:
        text = str(info[4][0]).split("%", 1)[0]
        address = ipaddress.ip_address(text)
        if address not in addresses:
            addresses.append(address)
    refused = [a for a in addresses if not _allowed(a, networks)]
    if refused or not addresses:
        shown = ", ".join(str(a) for a in refused[:3]) or "none"
        raise AddressRefused(
            f"the endpoint's host resolves to an address webhooks may not reach ({shown}); "
            "allow its network with STINT_WEBHOOK_ALLOWED_NETWORKS if that is intended"
        )
    pinned = addresses[0]
    literal = f"[{pinned}]" if pinned.version == 6 else str(pinned)
    netloc = f"{literal}:{parts.port}" if parts.port else literal
    host_header = parts.netloc.rsplit("@", 1)[-1]
    sni = host if parts.scheme == "https" else None
    return Target(urlunsplit(parts._replace(netloc=netloc)), host_header, sni)


def parse_networks(cidrs: Sequence[str]) -> list[Network]:
    """The allowed networks from their settings (already checked there)."""
    return [ipaddress.ip_network(c, strict=False) for c in cidrs]
