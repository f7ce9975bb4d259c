"""Sign-in by an AWS Application Load Balancer's OIDC authentication.

An ALB with an ``authenticate-oidc`` rule signs the person in with the
identity provider, then forwards every request with ``x-amzn-oidc-data``: a
JWT signed with ES256 by the load balancer. Its header names the key
(``kid``), the load balancer (``signer``, its ARN), the identity provider
(``iss``), the rule's OIDC client (``client``) and an expiry (``exp``); its
claims are the person's (``email``, ``sub``, ``exp``, ``iss``).

The ALB sign-in is on when ``ENGINE_CONSOLE_ALB_REGION`` (or
``ENGINE_CONSOLE_ALB_KEYS_DIR``) is set, and then it needs all of
``ENGINE_CONSOLE_ALB_ARN`` (our load balancer's ARN, several
comma-separated), ``ENGINE_CONSOLE_ALB_ISSUER`` and
``ENGINE_CONSOLE_ALB_CLIENT_ID``: ``engine console`` refuses to start
without them (:meth:`ConsoleSettings.check_alb`), and a token is refused
when any is unset. Anyone can send the header to a console that is reached
without the load balancer, and any ALB in any account signs tokens with the
same regional keys: only the signer, issuer and client tie a token to ours.

A token is accepted only when all of these hold:

- the algorithm is ES256 and the signature verifies with the key its
  ``kid`` names; ``kid`` must look like a key id, and the key is read only
  from the region's fixed endpoint
  ``https://public-keys.auth.elb.<region>.amazonaws.com/<kid>`` (or
  ``ENGINE_CONSOLE_ALB_KEYS_DIR/<kid>.pem``), never from a URL the token names;
  a kid not found is not looked for again for a minute, and at most ten keys
  are fetched a minute, so made-up kids cost the console nothing;
- ``signer`` is one of ``ENGINE_CONSOLE_ALB_ARN`` (a token with none is refused);
- ``iss`` (header, and the claim when present) is ``ENGINE_CONSOLE_ALB_ISSUER``;
- ``client`` is ``ENGINE_CONSOLE_ALB_CLIENT_ID``;
- ``exp`` (the claim, required, and the header's when present) is in the future.

The person is the ``email`` claim (else ``sub``); their role is an
``engine users`` user's of that name, else ``ENGINE_CONSOLE_OIDC_ROLE``. The
session made from a token ends when the token expires (later tokens of the
same person move that forward: :mod:`engine.console.sessions`). The ALB pads
its base64url segments with ``=``, which JWT libraries refuse: the padding
is stripped first, as AWS's own example does.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jwt
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from engine.console.settings import ConsoleSettings
from engine.errors import EngineError

__all__ = ["HEADER", "AlbToken", "OidcRefused", "verify_alb_token"]

HEADER = "x-amzn-oidc-data"
_KID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_MAX_KEYS = 64  # cached public keys (the ALB rotates a few)
# A kid that could not be had is not asked for again for _MISS_S, and at most
# _FETCHES_PER_MIN keys are fetched a minute: headers with made-up kids (they
# need no signature to be read) cannot make the console a client of the endpoint.
_MISS_S = 60.0
_MAX_MISSES = 1024
_FETCHES_PER_MIN = 10
_keys: dict[str, Any] = {}
_misses: dict[str, float] = {}
_fetches: list[float] = []
_lock = threading.Lock()


class OidcRefused(EngineError):
    """The load balancer's header did not verify: forged, expired, or another signer's."""


@dataclass(frozen=True)
class AlbToken:
    """A verified token: whom it names, until when, and all its claims."""

    name: str
    expires_at: datetime
    claims: dict[str, Any]


def _public_key(console: ConsoleSettings, kid: str) -> Any:
    if not _KID.fullmatch(kid):
        raise OidcRefused(f"token names an invalid key id {kid[:40]!r}")
    cache_key = f"{console.alb_keys_dir}|{console.alb_region}|{kid}"
    now = time.monotonic()
    with _lock:
        if cache_key in _keys:
            return _keys[cache_key]
        if _misses.get(cache_key, 0.0) > now:
            raise OidcRefused(f"no public key {kid!r} (not found lately; not asked again yet)")
        if console.alb_keys_dir is None:
            _fetches[:] = [t for t in _fetches if t > now - 60.0]
            if len(_fetches) >= _FETCHES_PER_MIN:
                raise OidcRefused(
                    f"no public key {kid!r} fetched: {_FETCHES_PER_MIN} keys were fetched "
                    "in the last minute"
                )
            _fetches.append(now)
    try:
        pem = _read_key(console, kid)
        key = load_pem_public_key(pem)
    except (OidcRefused, ValueError) as exc:
        with _lock:
            if len(_misses) >= _MAX_MISSES:
                _misses.clear()
            _misses[cache_key] = now + _MISS_S
        if isinstance(exc, ValueError):
            raise OidcRefused(f"the load balancer's key {kid!r} is not a PEM public key") from None
        raise
    with _lock:
        if len(_keys) >= _MAX_KEYS:
            _keys.clear()
        _keys[cache_key] = key
    return key


def _read_key(console: ConsoleSettings, kid: str) -> bytes:
    if console.alb_keys_dir is not None:
        path = console.alb_keys_dir / f"{kid}.pem"
        try:
            return path.read_bytes()
        except OSError:
            raise OidcRefused(f"no public key {kid!r} in {console.alb_keys_dir}") from None
    # the region's fixed endpoint: the region is a validated setting, the kid a plain id
    url = f"https://public-keys.auth.elb.{console.alb_region}.amazonaws.com/{kid}"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            pem: bytes = resp.read(16_384)
            return pem
    except OSError as exc:
        raise OidcRefused(f"cannot fetch the load balancer's key {kid!r}: {exc}") from None


def _expiry(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OidcRefused(f"{HEADER} has no numeric expiry ({where} exp)")
    if value <= time.time():
        raise OidcRefused(f"{HEADER} has expired")
    return float(value)


def verify_alb_token(console: ConsoleSettings, token: str) -> AlbToken:
    """The token's person and expiry, verified; :class:`OidcRefused` saying why not."""
    arns, issuer, client = console.alb_arns, console.alb_issuer, console.alb_client_id
    if not arns or not issuer or not client:
        raise OidcRefused("the load balancer's sign-in lacks " + ", ".join(console.alb_missing()))
    token = ".".join(part.rstrip("=") for part in token.strip().split("."))
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise OidcRefused(f"malformed {HEADER} header: {exc}") from None
    if header.get("alg") != "ES256":
        raise OidcRefused(f"{HEADER} must be signed with ES256, not {header.get('alg')!r}")
    # who signed it, for whom, from where: checked before any key is looked for
    if header.get("signer") not in arns:
        raise OidcRefused(f"{HEADER} was not signed by our load balancer")
    if header.get("iss") != issuer:
        raise OidcRefused(f"{HEADER} comes from another issuer")
    if header.get("client") != client:
        raise OidcRefused(f"{HEADER} was issued for another client")
    header_exp = _expiry(header["exp"], "header") if "exp" in header else None
    key = _public_key(console, str(header.get("kid", "")))
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            key,
            algorithms=["ES256"],
            options={"require": ["exp"], "verify_aud": False, "verify_iss": False},
        )
    except jwt.ExpiredSignatureError:
        raise OidcRefused(f"{HEADER} has expired") from None
    except jwt.PyJWTError as exc:
        raise OidcRefused(f"{HEADER} does not verify: {exc}") from None
    if "iss" in claims and claims["iss"] != issuer:
        raise OidcRefused(f"{HEADER} comes from another issuer")
    expires = _expiry(claims["exp"], "claim")
    if header_exp is not None:
        expires = min(expires, header_exp)
    name = claims.get("email") or claims.get("sub")
    if not isinstance(name, str) or not name:
        raise OidcRefused(f"{HEADER} names nobody (no email or sub claim)")
    return AlbToken(name=name, expires_at=datetime.fromtimestamp(expires, UTC), claims=claims)
