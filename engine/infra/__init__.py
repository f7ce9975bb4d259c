"""Plumbing that knows no flow: logs, secrets, shipped files, metrics, faults, outages, JSON.

- :mod:`.logs`: one logging configuration, readable lines or JSON, secrets masked;
- :mod:`.secrets`: passwords, AWS keys and webhook URLs masked in whatever is printed;
- :mod:`.resources`: where ``migrations/`` and ``reports/`` are, in a checkout or a wheel;
- :mod:`.metrics`: what a worker did, in Prometheus text;
- :mod:`.faults`: named points where a chaos run injects a fault (no-ops otherwise);
- :mod:`.outage`: a database outage noticed once, waited out with capped
  backoff, ended once (invariant 15);
- :mod:`.json_fields`: a result value's fields, JSON-ready (ids as text, times
  in ISO 8601), what every ``as_json`` builds on.
"""
