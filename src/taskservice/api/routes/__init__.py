"""Route modules, one per resource.

A route module is named after its path (`/v1/tasks` is `tasks.py`, `/v1/schedules`
`schedules.py`) and sits over the use case of the same name (`usecases/tasks.py`,
`usecases/schedules.py`, `usecases/tokens.py`); so several share their name with
modules of other layers, which name them in turn. Where no use case has the name,
the module's docstring says what it serves: `webhooks.py` is over
`usecases/subscriptions.py`, `overview.py` over `usecases/tasks.TaskService.overview`
(`db/overview.py`), `metrics.py` serves `common/metrics.py`.
"""
