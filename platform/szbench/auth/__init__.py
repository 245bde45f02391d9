"""Authentication and authorization.

- :mod:`szbench.auth.passwords`: scrypt password hashes.
- :mod:`szbench.auth.service`: users, login, API tokens (hashed, scoped, expiring, revocable).
- :mod:`szbench.auth.dependencies`: the FastAPI dependencies every route declares
  (``Anyone``, ``SignedIn``, ``Submitter``, ``AdminOnly``) that resolve the caller from a
  bearer token or the web session cookie and check role and token scope.
- :mod:`szbench.auth.policy`: who may see or change which object (ownership, visibility,
  held-out data, hidden phases); used by services and queries alike.
- :mod:`szbench.auth.cookies`: the signed session cookie for the web UI (same API token
  underneath); see its docstring for how a page logs a user in and out.
"""
