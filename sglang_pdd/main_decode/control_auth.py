"""CURVE authentication of the Main-Decode control socket: ZeroMQ's own, through pyzmq.

Keys are ZeroMQ certificate files, made by ``sglang-pdd control-keys --out DIR`` (pyzmq's
``zmq.auth.create_certificates``): ``NAME.key`` holds a public key, ``NAME.key_secret`` the
pair. Main-Decode gets its pair (``--pdd-control-curve-secret main.key_secret``) and a folder of
the public keys of the routers it accepts (``--pdd-control-curve-clients DIR``); a router gets
its own pair (``--control-curve-secret router.key_secret``) and MD's public key
(``--control-curve-server main.key``). The traffic is encrypted, and a peer whose key is not in
MD's folder fails the handshake: it can send MD nothing. pyzmq's ``ThreadAuthenticator``
answers the ZeroMQ authentication requests, on a context of the control socket's own (SGLang's
sockets, on the shared context, stay untouched).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator


def _key_pair(path: str, flag: str) -> tuple[bytes, bytes]:
    """(public, secret) from a ``.key_secret`` certificate file; ValueError naming ``flag``."""
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{flag} {path}: not a readable ZeroMQ certificate ({exc})") from exc
    if not secret:
        raise ValueError(
            f"{flag} {path}: holds no secret key (give the .key_secret file that "
            "sglang-pdd control-keys wrote)"
        )
    return public, secret


def _public_key(path: str, flag: str) -> bytes:
    try:
        public, _ = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{flag} {path}: not a readable ZeroMQ certificate ({exc})") from exc
    return public


@dataclass(frozen=True)
class CurveServer:
    """Main-Decode's side: its key pair and the folder of accepted routers' public keys."""

    secret_file: str
    clients_dir: str

    def __post_init__(self) -> None:
        _key_pair(self.secret_file, "--pdd-control-curve-secret")
        folder = Path(self.clients_dir)
        if not folder.is_dir() or not any(folder.glob("*.key")):
            raise ValueError(
                f"--pdd-control-curve-clients {self.clients_dir}: needs a folder "
                "holding the routers' public keys (NAME.key files)"
            )

    def secure(self, socket: zmq.Socket) -> ThreadAuthenticator:
        """Make ``socket`` (not yet bound, on a context of its own) a CURVE server that only
        the accepted routers can reach; returns the running authenticator (stop it with the
        socket)."""
        auth = ThreadAuthenticator(socket.context)
        auth.start()
        auth.configure_curve(domain="*", location=self.clients_dir)
        public, secret = _key_pair(self.secret_file, "--pdd-control-curve-secret")
        socket.curve_publickey = public
        socket.curve_secretkey = secret
        socket.curve_server = True
        return auth


@dataclass(frozen=True)
class CurveClient:
    """A router's side: its key pair and Main-Decode's public key."""

    secret_file: str
    server_public_file: str

    def __post_init__(self) -> None:
        _key_pair(self.secret_file, "--control-curve-secret")
        _public_key(self.server_public_file, "--control-curve-server")

    def secure(self, socket: zmq.Socket) -> None:
        """Make ``socket`` (not yet connected) a CURVE client of Main-Decode."""
        public, secret = _key_pair(self.secret_file, "--control-curve-secret")
        socket.curve_publickey = public
        socket.curve_secretkey = secret
        socket.curve_serverkey = _public_key(self.server_public_file, "--control-curve-server")


def write_keys(out_dir: str, names: list[str]) -> list[Path]:
    """Write a key pair per name into ``out_dir`` (``NAME.key``, ``NAME.key_secret``)."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        if not name or any(c in name for c in "/\\") or name.startswith("."):
            raise ValueError(f"--names: {name!r} is not a plain file name")
        public, secret = zmq.auth.create_certificates(str(folder), name)
        written += [Path(public), Path(secret)]
    return written


def main(argv: list[str]) -> int:
    """``sglang-pdd control-keys --out DIR [--names main,router]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="sglang-pdd control-keys", description=__doc__)
    parser.add_argument("--out", required=True, help="folder to write the key files into")
    parser.add_argument(
        "--names", default="main,router", help="comma-separated key names, one pair each"
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.names.split(",") if n.strip()]
    if not names:
        parser.error("--names needs at least one name")
    try:
        for path in write_keys(args.out, names):
            print(path)
    except ValueError as exc:
        parser.error(str(exc))
    return 0
