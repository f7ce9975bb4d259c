"""``engine console``: the reports, live, behind sign-in, with the actions people take.

- :mod:`.app`: the Starlette app, assembled from the areas, served by uvicorn;
- :mod:`.areas`: one module per area (runs, a job, approvals, dead letters,
  schedules, workers, audit, users, sign-in, the domain's pages), each with
  its handlers, routes and nav entry;
- :mod:`.shared`: what the areas share (settings, templates, the nav);
  :mod:`.actions`: how an action answers (its outcome flashed, audited);
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
