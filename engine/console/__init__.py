"""``engine console``: the reports, live, behind sign-in, with the actions people take.

- :mod:`.app`: the Starlette app (pages and actions), served by uvicorn;
- :mod:`.auth`: who is asking (a session, the load balancer's header), CSRF, permissions;
- :mod:`.sessions`: sessions kept on the server, and when they end;
- :mod:`.users`: local users (argon2 hashes) and sign-in with a lockout;
- :mod:`.oidc`: the AWS ALB's signed OIDC header;
- :mod:`.roles`: viewer, operator, accountant, admin and what each may do;
- :mod:`.settings`: ``ENGINE_CONSOLE_*``;
- :mod:`.extension`: pages a domain package adds (the ERP's periods), as data.

Importing this package loads no web framework: :mod:`.extension` and
:mod:`.roles` are what a flow package uses, and they need only the engine.
The web stack (Starlette, uvicorn, argon2, PyJWT) is in the worker extra.
"""
