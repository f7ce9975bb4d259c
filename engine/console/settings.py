"""The console's settings, each read from ``ENGINE_CONSOLE_<NAME>``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, IPvAnyNetwork, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from engine.console.roles import Role
from engine.errors import ConfigError

__all__ = ["ConsoleSettings"]

_ALB_ARN = re.compile(
    r"arn:aws[a-z-]*:elasticloadbalancing:[a-z0-9-]+:\d{12}:loadbalancer/app/[A-Za-z0-9/_.-]+"
)


class ConsoleSettings(BaseSettings):
    """How ``engine console`` signs people in and keeps their sessions."""

    model_config = SettingsConfigDict(env_prefix="ENGINE_CONSOLE_", extra="ignore")

    secret: SecretStr | None = Field(
        default=None,
        description=(
            "key that signs session cookies (32+ characters); unset: a random key per "
            "process, so sessions end when it restarts. Required off 127.0.0.1"
        ),
    )
    session_hours: float = Field(
        default=12.0, gt=0, le=24 * 14, description="a session's absolute lifetime from sign-in"
    )
    session_idle_minutes: float = Field(
        default=30.0, gt=0, le=24 * 60, description="a session unused this long ends"
    )
    secure_cookie: bool | None = Field(
        default=None,
        description=(
            "send the session cookie over HTTPS only; unset: Secure, except when "
            "`engine console` binds a loopback address (plain http there, said at start); "
            "false is refused off loopback"
        ),
    )
    signin_failures: int = Field(
        default=5,
        ge=1,
        le=100,
        description="wrong passwords for a user from one address before that address is locked",
    )
    signin_lock_s: float = Field(
        default=900.0,
        gt=0,
        description="how long a user stays locked from that address (its other addresses never)",
    )
    signin_per_address_per_min: int = Field(
        default=10,
        ge=1,
        le=10_000,
        description="sign-in attempts a minute from one address (IPv6: its /64; a successful "
        "one is given back); more: refused before any hash",
    )
    signin_per_s: float = Field(
        default=5.0,
        gt=0,
        le=1000,
        description="sign-in attempts a second from all addresses together, per console process "
        "(an address someone signed in from before is not held by it)",
    )
    signin_hashes: int = Field(
        default=2,
        ge=1,
        le=64,
        description="password hashes computed at once (argon2id, 64 MiB each); more wait, "
        "at most 4 per slot, then are refused",
    )
    trusted_proxies: Annotated[list[IPvAnyNetwork], NoDecode] = Field(
        default_factory=list,
        description="comma-separated addresses or networks of the proxies (the load balancer's "
        "subnets) whose X-Forwarded-For names the client; unset: the socket peer is the client",
    )
    alb_region: str | None = Field(
        default=None,
        pattern=r"^[a-z]{2}(-[a-z]+)+-\d$",
        description=(
            "AWS region of the Application Load Balancer whose signed OIDC header "
            "(x-amzn-oidc-data) signs people in; unset: the header is ignored"
        ),
    )
    alb_arn: str | None = Field(
        default=None,
        description=(
            "the ARN of our load balancer (several: comma-separated); required with the "
            "ALB sign-in: a token whose signer is not one of them is refused"
        ),
    )
    alb_issuer: str | None = Field(
        default=None,
        min_length=1,
        description=(
            "the identity provider's issuer (the ALB rule's Issuer); required with the ALB "
            "sign-in: a token of another issuer is refused"
        ),
    )
    alb_client_id: str | None = Field(
        default=None,
        min_length=1,
        description=(
            "the OIDC client id of the ALB rule; required with the ALB sign-in: a token for "
            "another client is refused"
        ),
    )
    alb_keys_dir: Path | None = Field(
        default=None,
        description=(
            "folder of the ALB's public keys as <kid>.pem, instead of fetching them from "
            "public-keys.auth.elb.<region>.amazonaws.com"
        ),
    )
    oidc_role: Role | None = Field(
        default=None,
        description=(
            "role of a person the ALB signed in who is not an `engine users` user; "
            "unset: such a person is refused"
        ),
    )
    role: str = Field(
        default="engine_console",
        pattern=r"^([A-Za-z_][A-Za-z0-9_]{0,62})?$",
        description=(
            "role the console takes on every connection (libpq -c role=), as the worker takes "
            "ENGINE_WORKER_ROLE; migration 0026 creates engine_console with only what the "
            "console does; empty: the login's own role"
        ),
    )
    refresh_s: float = Field(
        default=2.0, ge=0.5, le=60, description="how often a live job page asks for changes"
    )

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("secret")
    @classmethod
    def _long_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 32:
            n = len(value.get_secret_value())
            raise ValueError(f"a session key needs at least 32 characters, got {n}")
        return value

    @field_validator("alb_arn")
    @classmethod
    def _alb_arns(cls, value: str | None) -> str | None:
        if value is None:
            return None
        arns = [a.strip() for a in value.split(",")]
        for arn in arns:
            if not _ALB_ARN.fullmatch(arn):
                raise ValueError(
                    f"invalid load balancer ARN {arn[:200]!r}: expected "
                    "arn:aws:elasticloadbalancing:REGION:ACCOUNT:loadbalancer/app/NAME/ID "
                    "(several: comma-separated)"
                )
        return ",".join(arns)

    @property
    def alb(self) -> bool:
        """Whether the load balancer's OIDC header signs people in."""
        return self.alb_region is not None or self.alb_keys_dir is not None

    @property
    def alb_arns(self) -> frozenset[str]:
        """The load balancers whose tokens are accepted (none: no token is)."""
        return frozenset(a.strip() for a in (self.alb_arn or "").split(",") if a.strip())

    def alb_missing(self) -> list[str]:
        """The settings the ALB sign-in needs and lacks (empty: none, or it is off)."""
        if not self.alb:
            return []
        needed = [
            ("ENGINE_CONSOLE_ALB_ARN", self.alb_arn, "the ARN(s) of our load balancer"),
            ("ENGINE_CONSOLE_ALB_ISSUER", self.alb_issuer, "the identity provider's issuer"),
            ("ENGINE_CONSOLE_ALB_CLIENT_ID", self.alb_client_id, "the ALB rule's client id"),
        ]
        return [f"{name} ({what})" for name, value, what in needed if not value]

    def check_alb(self) -> None:
        """:class:`ConfigError` naming what the ALB sign-in lacks: without it, any signer passes."""
        missing = self.alb_missing()
        if missing:
            raise ConfigError(
                "refusing to start the console with the load balancer's sign-in "
                "(ENGINE_CONSOLE_ALB_REGION or ENGINE_CONSOLE_ALB_KEYS_DIR) without "
                + ", ".join(missing)
                + ": without them a token signed by any load balancer would sign in anyone"
            )
