"""The console's settings, each read from ``ENGINE_CONSOLE_<NAME>``."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

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
        default=5, ge=1, le=100, description="failed sign-ins before a user is locked"
    )
    signin_lock_s: float = Field(
        default=900.0, gt=0, description="how long a user stays locked after too many failures"
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
