"""Sign-in by an AWS Application Load Balancer's OIDC authentication.

An ALB with an ``authenticate-oidc`` rule signs the person in with the
identity provider, then forwards every request with ``x-amzn-oidc-data``: a
JWT signed with ES256 by the load balancer, whose header names the key
(``kid``) and the load balancer (``signer``). The public key is published at
``https://public-keys.auth.elb.<region>.amazonaws.com/<kid>`` (or read from
``ENGINE_CONSOLE_ALB_KEYS_DIR/<kid>.pem``). Only when one of those is
configured is the header read at all: without a load balancer in front,
anyone could send it.

A token is accepted when its signature verifies with the named key, it has
not expired, and (with ``ENGINE_CONSOLE_ALB_ARN``) its signer is our load
balancer. The person is its ``email`` claim (else ``sub``); their role is an
``engine users`` user's of that name, else ``ENGINE_CONSOLE_OIDC_ROLE``.
The ALB pads its base64url segments with ``=``, which JWT libraries refuse:
the padding is stripped first, as AWS's own example does.
"""

from __future__ import annotations

import re
import threading
import urllib.request
from typing import Any

import jwt
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from engine.console.settings import ConsoleSettings
from engine.errors import EngineError

__all__ = ["HEADER", "OidcRefused", "verify_alb_token"]

HEADER = "x-amzn-oidc-data"
_KID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_keys: dict[str, Any] = {}
_lock = threading.Lock()


class OidcRefused(EngineError):
    """The load balancer's header did not verify: forged, expired, or another signer's."""


def _public_key(console: ConsoleSettings, kid: str) -> Any:
    if not _KID.fullmatch(kid):
        raise OidcRefused(f"token names an invalid key id {kid[:40]!r}")
    cache_key = f"{console.alb_keys_dir}|{console.alb_region}|{kid}"
    with _lock:
        if cache_key in _keys:
            return _keys[cache_key]
    if console.alb_keys_dir is not None:
        path = console.alb_keys_dir / f"{kid}.pem"
        try:
            pem = path.read_bytes()
        except OSError:
            raise OidcRefused(f"no public key {kid!r} in {console.alb_keys_dir}") from None
    else:
        url = f"https://public-keys.auth.elb.{console.alb_region}.amazonaws.com/{kid}"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                pem = resp.read()
        except OSError as exc:
            raise OidcRefused(f"cannot fetch the load balancer's key {kid!r}: {exc}") from None
    try:
        key = load_pem_public_key(pem)
    except ValueError:
        raise OidcRefused(f"the load balancer's key {kid!r} is not a PEM public key") from None
    with _lock:
        _keys[cache_key] = key
    return key


def verify_alb_token(console: ConsoleSettings, token: str) -> dict[str, Any]:
    """The token's claims, verified; :class:`OidcRefused` saying why not."""
    token = ".".join(part.rstrip("=") for part in token.strip().split("."))
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise OidcRefused(f"malformed {HEADER} header: {exc}") from None
    if header.get("alg") != "ES256":
        raise OidcRefused(f"{HEADER} must be signed with ES256, not {header.get('alg')!r}")
    if console.alb_arn is not None and header.get("signer") != console.alb_arn:
        raise OidcRefused(f"{HEADER} was signed by another load balancer")
    key = _public_key(console, str(header.get("kid", "")))
    try:
        claims: dict[str, Any] = jwt.decode(
            token, key, algorithms=["ES256"], options={"require": ["exp"], "verify_aud": False}
        )
    except jwt.ExpiredSignatureError:
        raise OidcRefused(f"{HEADER} has expired") from None
    except jwt.PyJWTError as exc:
        raise OidcRefused(f"{HEADER} does not verify: {exc}") from None
    if not (claims.get("email") or claims.get("sub")):
        raise OidcRefused(f"{HEADER} names nobody (no email or sub claim)")
    return claims
