"""Who can reach a listening server: the addresses a person can open, and what a server
reachable from other machines exposes.

Why: `--host 0.0.0.0` binds every interface, but 0.0.0.0 is no address a browser can open;
the page is at one of the machine's own addresses. And a server other machines can reach,
with no token, lets anyone stream audio to it and read the transcripts (without TLS the
audio, the text and the token cross the network in clear text), so serve says so when it
starts.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

_SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address
_IF_INET6 = Path("/proc/net/if_inet6")  # Linux: every interface's IPv6 addresses


@dataclass(frozen=True)
class Exposure:
    """What guards a server: a bearer token, TLS; `open_rooms`: it serves rooms with no
    publish token (without a token, anyone may then make rooms and publish to them)."""

    token: bool
    tls: bool
    open_rooms: bool = False


def is_local(host: str) -> bool:
    """Only this machine can connect: a loopback address (127.0.0.0/8, ::1)."""
    ip = _ip(host)
    return ip is not None and ip.is_loopback


def openable(bound_host: str) -> list[str]:
    """The addresses a person can open for a bound one: itself, or for 0.0.0.0 / :: the
    machine's addresses of that family, other machines' way in first, loopback last."""
    ip = _ip(bound_host)
    if ip is None or not ip.is_unspecified:
        return [bound_host]
    found = _ipv4_addresses() if ip.version == 4 else _ipv6_addresses()
    loopback = "127.0.0.1" if ip.version == 4 else "::1"
    outside = [address for address in found if not is_local(address)]
    return [*dict.fromkeys(outside), loopback]


def exposure_warning(bound: list[tuple[str, int]], exposure: Exposure) -> str | None:
    """One line on what a server bound to these (host, port) exposes, and how to guard it;
    None when only this machine can reach it, or a token and TLS guard it."""
    outside = [f"{bracketed(host)}:{port}" for host, port in bound if not is_local(host)]
    if not outside or (exposure.token and exposure.tls):
        return None
    verb = "is" if len(outside) == 1 else "are"
    where = f"{' and '.join(outside)} {verb} reachable from other machines"
    tls = "--certfile CERT.pem --keyfile KEY.pem (TLS)"
    token = "--token-file FILE (clients then send the token)"
    rooms = ""
    if exposure.open_rooms:
        token += " or, for rooms alone, --publish-token-file FILE"
        rooms = ", make rooms and publish to them"
    if not exposure.token and not exposure.tls:
        return (
            f"{where} with no token and no TLS: anyone who reaches it can stream audio to "
            f"it{rooms} and read the transcripts, in clear text; add {token} and {tls}, or "
            "serve on --host 127.0.0.1"
        )
    if not exposure.tls:
        return (
            f"{where} without TLS: the token, the audio and the transcripts cross the network "
            f"in clear text; add {tls}"
        )
    anyone = f"anyone who reaches it can stream audio to it{rooms}"
    return f"{where} with no token: {anyone}; add {token}"


def listening_lines(bound: list[tuple[str, int]], exposure: Exposure) -> list[tuple[str, bool]]:
    """What serve says once its port is open, each line with whether it is a warning: each
    address listened on, for 0.0.0.0 / :: the pages a person can open, then what an unguarded
    port exposes."""
    scheme, page = ("wss", "https") if exposure.tls else ("ws", "http")
    lines = [
        (f"listening on {scheme}://{bracketed(host)}:{port}/ws "
         f"(page {page}://{bracketed(host)}:{port}/, metrics /metrics)", False)
        for host, port in bound
    ]  # fmt: skip
    for host, port in bound:
        hosts = openable(host)
        if hosts != [host]:
            pages = " or ".join(f"{page}://{bracketed(shown)}:{port}/" for shown in hosts)
            lines.append((f"open {pages}", False))
    warning = exposure_warning(bound, exposure)
    return lines if warning is None else [*lines, (warning, True)]


def wyoming_lines(bound: list[tuple[str, int]]) -> list[tuple[str, bool]]:
    """What serve says once its Wyoming port is open (which has no authentication)."""
    lines = []
    for host, port in bound:
        lines.append((f"wyoming on tcp://{bracketed(host)}:{port}", False))
        if not is_local(host):
            lines.append((f"Wyoming has no authentication: anyone who can reach port {port} "
                          "can use this server; keep it on a trusted LAN", True))
    return lines


def bracketed(host: str) -> str:
    """An IPv6 address as a URL writes it: [::1]."""
    return f"[{host}]" if ":" in host else host


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


def _ipv4_addresses() -> list[str]:
    """Each interface's IPv4 address (Linux asks the kernel; elsewhere the host name's)."""
    addresses: list[str] = []
    if sys.platform.startswith("linux"):
        import fcntl

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            for _, name in socket.if_nameindex():
                request = struct.pack("256s", name.encode()[:15])
                try:
                    answer = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request)
                except OSError:  # an interface without an IPv4 address
                    continue
                addresses.append(socket.inet_ntoa(answer[20:24]))
    return addresses or _by_host_name(socket.AF_INET)


def _ipv6_addresses() -> list[str]:
    """Each interface's IPv6 address that a browser can open (not link-local fe80::)."""
    try:
        lines = _IF_INET6.read_text().splitlines()
    except OSError:
        return _by_host_name(socket.AF_INET6)
    addresses = []
    for line in lines:
        digits = line.split()[0] if line.split() else ""
        try:
            ip = ipaddress.IPv6Address(int(digits, 16))
        except ValueError:
            continue
        if not ip.is_link_local:
            addresses.append(str(ip))
    return addresses


def _by_host_name(family: socket.AddressFamily) -> list[str]:
    try:
        found = socket.getaddrinfo(socket.gethostname(), None, family, socket.SOCK_STREAM)
    except OSError:
        return []
    return [str(info[4][0]) for info in found]
