"""The console's settings, each read from ``ENGINE_CONSOLE_<NAME>``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, IPvAnyNetwork, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from engine.console.roles import Role

__all__ = ["ConsoleSettings"]


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
    session_hours: float = Field(default=12.0, gt=0, le=24 * 14, description="session lifetime")
    secure_cookie: bool = Field(
        default=False, description="send the session cookie over HTTPS only (behind a TLS ALB)"
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
        pattern=r"^arn:aws[a-z-]*:elasticloadbalancing:",
        description="the load balancer's ARN: a token signed for another one is refused",
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

    @property
    def alb(self) -> bool:
        """Whether the load balancer's OIDC header signs people in."""
        return self.alb_region is not None or self.alb_keys_dir is not None
