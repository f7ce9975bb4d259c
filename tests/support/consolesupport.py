"""What the console tests share beside their fixtures: the users, signing in, serving the app.

A module of its own (not the console tests' conftest), so that tests import it
by a name no other folder's conftest shadows.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any

import jwt
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from starlette.testclient import TestClient

SECRET = "s3cret-session-key-of-the-tests-0123456789"
PASSWORDS = {
    "vera": ("viewer", "vera-password-123"),
    "otto": ("operator", "otto-password-123"),
    "anna": ("accountant", "anna-password-123"),
    "adam": ("admin", "adam-password-123"),
}
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = _CSRF.search(html)
    assert found, "the page carries no CSRF token"
    return found.group(1)


def sign_in(client: TestClient, name: str, password: str) -> TestClient:
    page = client.get("/signin")
    r = client.post(
        "/signin",
        data={"name": name, "password": password, "csrf": csrf_of(page.text)},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    assert r.headers["location"] == "/", f"sign-in of {name} refused"
    return client


def session_cookie(client: TestClient) -> dict[str, Any]:
    """What the signed session cookie carries (Starlette's: base64 JSON, then the signature)."""
    raw = client.cookies.get("engine_console")
    assert raw, "no session cookie"
    data = raw.strip('"').split(".", 1)[0]
    loaded: dict[str, Any] = json.loads(base64.b64decode(data + "=" * (-len(data) % 4)))
    return loaded


# -- the load balancer's OIDC header ----------------------------------------------------

ARN = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:loadbalancer/app/erp/abc"
ISSUER = "https://idp.example"
CLIENT = "console-client"
ALB = {"alb_arn": ARN, "alb_issuer": ISSUER, "alb_client_id": CLIENT}


def alb_key_pair(folder: Path, kid: str = "kid-1") -> Any:
    """A key the test makes, its public half where the console reads ALB keys (``<kid>.pem``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (folder / f"{kid}.pem").write_bytes(pem)
    return key


def alb_token(
    key: Any,
    *,
    email: str,
    exp: float,
    signer: str | None = ARN,
    kid: str = "kid-1",
    iss: str | None = ISSUER,
    client: str | None = CLIENT,
    header_exp: float | None = None,
    claim_iss: str | None = None,
) -> str:
    """A token as the ALB makes it: signer, issuer, client and expiry in its header too.

    ``None`` leaves a header field out; ``header_exp``/``claim_iss`` make the header's
    expiry or the claims' issuer differ from the other's.
    """
    header = {
        "kid": kid,
        "signer": signer,
        "iss": iss,
        "client": client,
        "exp": int(exp if header_exp is None else header_exp),
    }
    claims = {"email": email, "sub": "1234", "exp": int(exp), "iss": claim_iss or iss or ISSUER}
    token = jwt.encode(
        claims, key, algorithm="ES256", headers={k: v for k, v in header.items() if v is not None}
    )
    # the ALB pads its base64url segments
    return ".".join(p + "=" * (-len(p) % 4) for p in token.split("."))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """The console served by uvicorn on 127.0.0.1 in a thread, for a real browser."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise AssertionError("the console did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
