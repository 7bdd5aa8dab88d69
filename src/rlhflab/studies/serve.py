"""Serving a study with uvicorn on an address the caller chooses (loopback by default)."""

from __future__ import annotations

import ipaddress
import socket
from typing import Callable

from rlhflab.errors import AddressError
from rlhflab.studies.store import Rater, Study

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: any free port), so the links printed carry the real port; an
    address it cannot listen on is an AddressError."""
    if not 0 <= port <= 65535:
        raise AddressError(f"--port {port}: a port is a number from 0 (any free one) to 65535")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as err:
        sock.close()
        raise AddressError(f"cannot listen on {host}:{port} ({err.strerror or err}); choose another --host or "
                           "--port") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def base_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def rater_link(base: str, rater: Rater) -> str:
    return f"{base}/r/{rater.token}/"


def serve(study: Study, sock: socket.socket, announce: Callable[[str], None] = print) -> None:
    """Serve `study` on `sock` until interrupted (Ctrl-C)."""
    import uvicorn

    from rlhflab.studies.app import create_app

    host = sock.getsockname()[0]
    hosts = [*LOOPBACK_HOSTS, f"[{host}]" if ":" in host else host] if is_loopback(host) else ["*"]
    config = uvicorn.Config(create_app(study, hosts), log_level="warning", access_log=False, timeout_graceful_shutdown=2)
    announce(f"serving {study.directory} at {base_url(sock)} (Ctrl-C stops; ratings are saved as they are given)")
    uvicorn.Server(config).run(sockets=[sock])
