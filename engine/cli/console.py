"""``engine console``: the web console, and ``engine users``: who may sign in to it.

The console binds 127.0.0.1 by default. Another address is refused unless
sign-in works for more than this machine: a session key shared by every
console process (``ENGINE_CONSOLE_SECRET``) and someone to sign in (a local
user with a password, or the load balancer's OIDC header). The load
balancer's sign-in is refused without the signer ARN(s), issuer and client
id it must check. The session cookie is ``Secure`` unless the console binds
a loopback address (plain http there, said at start); ``false`` is refused
off loopback.
"""

from __future__ import annotations

import ipaddress
import logging
import sys

import click
from rich.table import Table

from engine.cli.audit import by_option
from engine.cli.output import out, print_json, print_table
from engine.cli.state import current
from engine.errors import BadInput, ConfigError, EngineError

__all__ = ["console", "users"]

log = logging.getLogger(__name__)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command("console")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to bind")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
def console(host: str, port: int) -> None:
    """Serve the web console: runs, a live job page, approvals, dead letters, schedules, workers."""
    import uvicorn

    from engine.console.app import create_app
    from engine.console.settings import ConsoleSettings
    from engine.console.users import list_users

    state = current()
    conf = ConsoleSettings()
    # every connection of the console takes its role (ENGINE_CONSOLE_ROLE), as create_app's do
    settings = state.settings
    if conf.role:
        settings = settings.model_copy(update={"session_role": conf.role})
    conf.check_alb()  # ConfigError naming ENGINE_CONSOLE_ALB_ARN & co. when they are missing
    loopback = _loopback(host)
    if conf.secure_cookie is False and not loopback:
        raise ConfigError(
            f"refusing ENGINE_CONSOLE_SECURE_COOKIE=false on {host}: a session cookie goes "
            "over plain http only to a loopback address (bind 127.0.0.1, or unset it)"
        )
    if conf.secure_cookie is None:
        conf = conf.model_copy(update={"secure_cookie": not loopback})
    people = [u for u in list_users(settings) if u.has_password]
    if not loopback:
        missing = []
        if conf.secret is None:
            missing.append(
                "ENGINE_CONSOLE_SECRET (a key of 32+ characters shared by every console)"
            )
        if not people and not conf.alb:
            missing.append(
                "someone to sign in: `engine users add NAME --role ROLE`, or the load "
                "balancer's OIDC sign-in (ENGINE_CONSOLE_ALB_REGION with ENGINE_CONSOLE_ALB_ARN, "
                "ENGINE_CONSOLE_ALB_ISSUER and ENGINE_CONSOLE_ALB_CLIENT_ID)"
            )
        if missing:
            raise BadInput(
                f"refusing to serve the console on {host}, beyond this machine, without "
                + " and ".join(missing)
                + "; or bind 127.0.0.1"
            )
    if not people and not conf.alb:
        click.echo(
            "no console user can sign in yet: add one with "
            "`engine users add NAME --role admin` (the password is read from standard input)",
            err=True,
        )
    try:
        registry = state.registry
    except EngineError:
        registry = None  # pages still render, without graphs or the flows' pages
    app = create_app(settings, conf, registry)
    if not conf.secure_cookie:
        said = (
            f"console: plain http allowed on the loopback address {host}: the session cookie "
            "is not Secure (ENGINE_CONSOLE_SECURE_COOKIE=true to require https)"
        )
        log.warning("%s", said)
        click.echo(said, err=True)
    role = f"role {conf.role}" if conf.role else "the login's role"
    click.echo(f"console on http://{host}:{port}/ ({role}; Ctrl-C stops it)", err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning", proxy_headers=False)


@click.group("users")
def users() -> None:
    """The console's users: add, list, remove, change a password or a role."""


def _password(new: bool) -> str:
    """The password from standard input: prompted (twice) on a terminal, else its first line."""
    if sys.stdin.isatty():
        return str(click.prompt("password", hide_input=True, confirmation_prompt=new))
    line = sys.stdin.readline().rstrip("\r\n")
    if not line:
        raise BadInput(
            "no password on standard input (e.g. `printf '%s\\n' \"$PW\" | engine users add ...`)"
        )
    return line


@users.command("add")
@click.argument("name")
@click.option("--role", required=True, help="viewer, operator, accountant or admin")
@click.option(
    "--oidc", is_flag=True, help="no password: signs in only through the load balancer's OIDC"
)
@by_option
def users_add(name: str, role: str, oidc: bool, by: str | None) -> None:
    """Add a user; the password is read from standard input (never an argument)."""
    from engine.console import users as u

    u.check_name(name)
    u.parse_role(role)
    password = None if oidc else u.check_password(_password(new=True))
    u.add_user(current().settings, name, role, password, actor=by)
    out.print(f"user {name} added ({role})", highlight=False, markup=False)


@users.command("list")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def users_list(as_json: bool) -> None:
    """List the users and their roles (never a password or its hash)."""
    from engine.console import users as u

    rows = u.list_users(current().settings)
    if as_json:
        print_json(
            {
                "users": [
                    {
                        "name": r.name,
                        "role": r.role,
                        "password": r.has_password,
                        "locked": r.locked,
                        "last_signin_at": r.last_signin_at.isoformat()
                        if r.last_signin_at
                        else None,
                    }
                    for r in rows
                ]
            }
        )
        return
    if not rows:
        out.print("no console users (engine users add NAME --role ROLE)", highlight=False)
        return
    table = Table("name", "role", "sign-in", "last signed in", "locked")
    for r in rows:
        table.add_row(
            r.name,
            r.role,
            "password" if r.has_password else "OIDC only",
            f"{r.last_signin_at:%Y-%m-%d %H:%M}" if r.last_signin_at else "never",
            "locked" if r.locked else "",
        )
    print_table(table, markup=False, highlight=False)


@users.command("remove")
@click.argument("name")
@by_option
def users_remove(name: str, by: str | None) -> None:
    """Remove a user: their next request is refused."""
    from engine.console import users as u

    u.remove_user(current().settings, name, actor=by)
    out.print(f"user {name} removed", highlight=False, markup=False)


@users.command("passwd")
@click.argument("name")
@by_option
def users_passwd(name: str, by: str | None) -> None:
    """Set a user's password (from standard input); it also unlocks them."""
    from engine.console import users as u

    password = u.check_password(_password(new=True))
    u.set_password(current().settings, name, password, actor=by)
    out.print(f"password of {name} changed", highlight=False, markup=False)


@users.command("role")
@click.argument("name")
@click.argument("role")
@by_option
def users_role(name: str, role: str, by: str | None) -> None:
    """Change a user's role."""
    from engine.console import users as u

    u.set_role(current().settings, name, role, actor=by)
    out.print(f"{name} is now {role}", highlight=False, markup=False)
