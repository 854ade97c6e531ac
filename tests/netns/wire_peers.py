"""Two ends of a test connection, run inside lab namespaces: `python wire_peers.py MODE ...`.

serve-plain PORT               accept one connection, read until EOF, print the byte count
send-plain HOST PORT HEX       connect and send the bytes (hex) in the clear
serve-tls PORT CERT KEY        like serve-plain, over TLS 1.3 with this certificate
send-tls HOST PORT CA HEX      connect over TLS 1.3 (verifying against CA) and send the bytes
"""

from __future__ import annotations

import json
import socket
import ssl
import sys


def _serve(port: int, wrap) -> None:
    with socket.create_server(("0.0.0.0", port)) as server:
        print("listening", flush=True)
        conn, _ = server.accept()
        conn = wrap(conn)
        total = 0
        while data := conn.recv(1 << 16):
            total += len(data)
        print(total, flush=True)
        conn.close()


def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "serve-plain":
        _serve(int(argv[1]), lambda c: c)
    elif mode == "serve-tls":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_cert_chain(argv[2], argv[3])
        _serve(int(argv[1]), lambda c: ctx.wrap_socket(c, server_side=True))
    elif mode == "send-plain":
        with socket.create_connection((argv[1], int(argv[2])), timeout=30) as conn:
            conn.sendall(bytes.fromhex(argv[3]))
    elif mode == "send-tls":
        ctx = ssl.create_default_context(cafile=argv[3])
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.check_hostname = False
        with socket.create_connection((argv[1], int(argv[2])), timeout=30) as raw, ctx.wrap_socket(raw) as conn:
            conn.sendall(bytes.fromhex(argv[4]))
    elif mode == "try-connect":
        print(json.dumps({target: _try_connect(target) for target in argv[1:]}))
    elif mode == "tls-no-cert":
        print(_tls_without_certificate(argv[1], int(argv[2]), argv[3]))
    else:
        raise SystemExit(f"unknown mode {mode}")


def _try_connect(target: str) -> str:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return type(exc).__name__
    return "connected"


def _tls_without_certificate(host: str, port: int, ca: str) -> str:
    ctx = ssl.create_default_context(cafile=ca)
    ctx.check_hostname = False
    try:
        with socket.create_connection((host, port), timeout=5) as raw, ctx.wrap_socket(raw) as conn:
            conn.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            if conn.recv(1) == b"":
                return "refused: closed without a reply"
    except (ssl.SSLError, OSError) as exc:
        return f"refused: {exc}"
    return "completed"


if __name__ == "__main__":
    main(sys.argv[1:])
