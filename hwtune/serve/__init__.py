"""``hwtune serve``: selection over HTTP for engines, schedulers and dashboards that cannot import hwtune.

A read-only JSON API over one result store (docs/serve.md): ``POST /v1/select/attention`` and
``POST /v1/select/all2all`` answer what ``hwtune.select_attention`` / ``select_all2all`` answer (the same
``Selection.to_dict()``, the same errors); ``GET /v1/environments`` and ``GET /v1/runs`` list the store;
``GET /v1/health`` says whether the store answers. Modules:

* ``auth``: who may listen where (a token for any address but loopback); light, checked before anything starts;
* ``requests``: request bodies checked field by field into ``AttentionSpec`` / ``All2AllSpec``;
* ``service``: the store it reads, the answer cache and the calls into the library (no web framework);
* ``app``: the Starlette application (routes, bearer token, JSON errors);
* ``server``: binding the socket and running uvicorn.

Only ``app`` and ``server`` import the web framework (the ``serve`` extra); nothing in ``hwtune.selector`` or
``import hwtune`` imports this package.
"""
