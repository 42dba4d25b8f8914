"""Small client for the Airflow 3 REST API (v2), used by the CLI, the demo and the tests.

Runs are always addressed by run_id: runs triggered through the API have a NULL logical_date.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import requests

from onceflow.errors import ConfigError
from onceflow.errors.cli import (  # the client's errors, importable from here too
    AirflowConflict,
    AirflowError,
    AirflowNotFound,
    AirflowTimeout,
    RunIdError,
)
from onceflow.ledger.txids import txid_problem

if TYPE_CHECKING:
    from onceflow.settings import Settings

FINAL_STATES = frozenset({"success", "failed"})
# how long a wait for runs looks often (AirflowClient.wait_for_runs) before once a second
SLOW_POLL_AFTER_S = 30.0


def validate_run_id(run_id: str) -> str:
    """Reject run ids that are not txids (ledger.txids.txid_problem), saying what is allowed."""
    problem = txid_problem(run_id)
    if problem:
        raise RunIdError(run_id, problem)
    return run_id


def _q(part: str) -> str:
    return quote(part, safe="")


def _reworded(exc: AirflowError, status: int, said: str, detail: bool = False) -> AirflowError:
    """`exc` (Airflow's 404 or 409) again, of its class and with its URL and detail, saying
    `said` (which run or DAG: Airflow's own wording does not name them), then the URL and the
    status (and, with `detail`, Airflow's detail)."""
    tail = f": {exc.detail}" if detail else ""
    return type(exc)(
        f"{said} [{exc.url} -> HTTP {status}{tail}]",
        url=exc.url,
        status=status,
        detail=exc.detail,
    )


def failed_task(task_instances: Iterable[dict]) -> dict | None:
    """The task instance a run failed on: the first `failed` one to start (the tasks after it
    are `upstream_failed`); None when none failed (a run marked failed from outside)."""
    failed = [t for t in task_instances if t.get("state") == "failed"]
    return min(failed, key=lambda t: t.get("start_date") or "", default=None)


# how much of a log's tail log_error returns when the log records no exception
LOG_TAIL_LINES = 5


def log_error(content: Any) -> str:
    """What a task log (as the logs endpoint answers it) ended with: the last exception it
    records as `type: message`, so that the reason is read without opening the Airflow UI;
    else its last LOG_TAIL_LINES lines (a try that was killed logs no exception)."""
    if isinstance(content, str):
        lines = [line for line in content.splitlines() if line.strip()]
        return "\n".join(lines[-LOG_TAIL_LINES:])
    records = [r for r in content if isinstance(r, dict)]
    for record in reversed(records):
        details = [d for d in record.get("error_detail") or [] if isinstance(d, dict)]
        if details:
            raised = details[0]  # the one the try ended with; its causes follow it
            return f"{raised.get('exc_type')}: {raised.get('exc_value')}"
    events = [str(r.get("event", "")) for r in records if r.get("event")]
    return "\n".join(events[-LOG_TAIL_LINES:])


class AirflowClient:
    """Token-authenticated client; re-fetches the token once when it expires."""

    def __init__(self, url: str, user: str, password: str, timeout: float = 30.0):
        self.url = url.rstrip("/")
        self.user = user
        self.password = password
        self.timeout = timeout
        self._session = requests.Session()
        self._token: str | None = None

    # -- plumbing ---------------------------------------------------------------------------

    def token(self) -> str:
        """POST /auth/token with the user's password; returns (and caches) the JWT."""
        url = f"{self.url}/auth/token"
        try:
            resp = self._session.post(
                url, json={"username": self.user, "password": self.password}, timeout=self.timeout
            )
        except requests.RequestException as exc:
            raise AirflowError(f"POST {url}: Airflow unreachable ({exc})", url=url) from None
        if resp.status_code not in (200, 201):
            raise self._error("POST", url, resp)
        self._token = resp.json()["access_token"]
        return self._token

    def _error(self, method: str, url: str, resp: requests.Response) -> AirflowError:
        try:
            detail = resp.json().get("detail", resp.text)
        except ValueError:
            detail = resp.text.strip()[:500]
        cls = {404: AirflowNotFound, 409: AirflowConflict}.get(resp.status_code, AirflowError)
        return cls(
            f"{method} {url} -> HTTP {resp.status_code}: {detail}",
            url=url,
            status=resp.status_code,
            detail=detail,
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict | None = None,
        auth: bool = True,
    ) -> Any:
        """One API call; returns the decoded JSON (None for empty bodies)."""
        url = f"{self.url}{path}"
        for attempt in range(2):
            headers = {}
            if auth:
                if self._token is None:
                    self.token()
                headers["Authorization"] = f"Bearer {self._token}"
            try:
                resp = self._session.request(
                    method, url, json=json, params=params, headers=headers, timeout=self.timeout
                )
            except requests.RequestException as exc:
                raise AirflowError(
                    f"{method} {url}: Airflow unreachable ({exc})", url=url
                ) from None
            if resp.status_code == 401 and auth and attempt == 0:
                self._token = None  # expired: log in again once
                continue
            if resp.status_code >= 400:
                raise self._error(method, url, resp)
            if not resp.content:
                return None
            return resp.json()
        raise AssertionError("unreachable")

    def _run_call(self, dag_id: str, run_id: str, call: Callable[[], Any]) -> Any:
        """Turn Airflow's 404 wording into 'run X not found in DAG Y' / 'DAG Y not found'."""
        try:
            return call()
        except AirflowNotFound as exc:
            text = str(exc.detail)
            if "DagRun" in text or "run_id" in text or "Dag Run" in text:
                msg = f"run {run_id!r} not found in DAG {dag_id!r}"
            else:
                msg = f"DAG {dag_id!r} not found ({text})"
            raise _reworded(exc, 404, msg) from None

    # -- API --------------------------------------------------------------------------------

    def health(self) -> dict:
        """GET /api/v2/monitor/health (no login needed)."""
        return self.request("GET", "/api/v2/monitor/health", auth=False)

    def get_dag(self, dag_id: str) -> dict:
        return self.request("GET", f"/api/v2/dags/{_q(dag_id)}")

    def wait_for_dag(self, dag_id: str, timeout: float = 120.0, poll: float = 1.0) -> dict:
        """Wait until the dag-processor has parsed and serialized the DAG; returns it."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                dag = self.get_dag(dag_id)
                if not dag.get("is_stale", False):
                    return dag
            except AirflowNotFound:
                pass
            if time.monotonic() >= deadline:
                raise AirflowTimeout(
                    f"DAG {dag_id!r} did not appear in Airflow at {self.url} within {timeout:.0f}s "
                    f"({self._import_errors_said()})",
                    url=self.url,
                )
            time.sleep(poll)

    def import_errors(self) -> list[dict]:
        return self.request("GET", "/api/v2/importErrors", params={"limit": 100})["import_errors"]

    def _import_errors_said(self) -> str:
        """Why a DAG may be missing, as far as Airflow tells: its DAG files' import errors."""
        try:
            errors = self.import_errors()
        except AirflowError as e:
            return f"its import errors could not be read: {e}"
        if not errors:
            return (
                "no DAG file has an import error: is the DAG file in the DAGs folder, the "
                "dag-processor running?"
            )
        first = errors[0]
        said = (first.get("stack_trace") or "").strip().splitlines()[-1:] or [""]
        return (
            f"{len(errors)} DAG file(s) with an import error, e.g. {first.get('filename')}: "
            f"{said[0]}"
        )

    def unpause(self, dag_id: str) -> dict:
        return self.set_paused(dag_id, False)

    def pause(self, dag_id: str) -> dict:
        return self.set_paused(dag_id, True)

    def set_paused(self, dag_id: str, paused: bool) -> dict:
        return self.request(
            "PATCH",
            f"/api/v2/dags/{_q(dag_id)}",
            json={"is_paused": paused},
            params={"update_mask": "is_paused"},
        )

    def trigger(self, dag_id: str, run_id: str, conf: dict | None = None) -> dict:
        """Create a run with our run_id (logical_date null: several runs may coexist)."""
        validate_run_id(run_id)
        body = {"dag_run_id": run_id, "logical_date": None, "conf": conf or {}}
        try:
            return self.request("POST", f"/api/v2/dags/{_q(dag_id)}/dagRuns", json=body)
        except AirflowConflict as exc:
            raise _reworded(exc, 409, f"run {run_id!r} already exists in DAG {dag_id!r}") from None
        except AirflowNotFound as exc:
            said = f"DAG {dag_id!r} not found (not parsed yet?)"
            raise _reworded(exc, 404, said, detail=True) from None

    def runs(self, dag_id: str) -> list[dict]:
        """Every run of a DAG, oldest first (its run id, run type and state among them)."""
        return self._pages(f"/api/v2/dags/{_q(dag_id)}/dagRuns", "dag_runs", "run_after")

    def _pages(self, path: str, key: str, order_by: str, **params: Any) -> list[dict]:
        """Every item of a paged list, 100 at a time."""
        items: list[dict] = []
        while True:
            query = {**params, "order_by": order_by, "limit": 100, "offset": len(items)}
            page = self.request("GET", path, params=query)
            batch = page.get(key, [])
            items.extend(batch)
            if not batch or len(items) >= page.get("total_entries", 0):
                return items

    def get_run(self, dag_id: str, run_id: str) -> dict:
        return self._run_call(
            dag_id,
            run_id,
            lambda: self.request("GET", f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}"),
        )

    def clear_run(self, dag_id: str, run_id: str, only_failed: bool = False) -> dict:
        """Clear every task of the run (same run_id) so the scheduler runs it again."""
        body = {"dry_run": False, "only_failed": only_failed}
        return self._run_call(
            dag_id,
            run_id,
            lambda: self.request(
                "POST", f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}/clear", json=body
            ),
        )

    def fail_run(self, dag_id: str, run_id: str, note: str | None = None) -> dict:
        """Mark the run failed (its running tasks are stopped by Airflow)."""
        body: dict[str, Any] = {"state": "failed"}
        if note:
            body["note"] = note[:1000]
        return self._run_call(
            dag_id,
            run_id,
            lambda: self.request(
                "PATCH", f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}", json=body
            ),
        )

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        path = f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}/taskInstances"
        items: list[dict] = []
        while True:
            page = self._run_call(
                dag_id,
                run_id,
                lambda: self.request("GET", path, params={"limit": 100, "offset": len(items)}),
            )
            batch = page.get("task_instances", [])
            items.extend(batch)
            if not batch or len(items) >= page.get("total_entries", 0):
                return items

    def _log_content(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> Any:
        """One try's task log as Airflow answers it: a list of records, or a text."""
        path = (
            f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}/taskInstances/{_q(task_id)}"
            f"/logs/{int(try_number)}"
        )
        page = self._run_call(
            dag_id, run_id, lambda: self.request("GET", path, params={"full_content": "true"})
        )
        return page.get("content", []) if isinstance(page, dict) else []

    def task_error(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
        """What one try of a task ended with (log_error of its log)."""
        return log_error(self._log_content(dag_id, run_id, task_id, try_number))

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
        """The text of one try's task log: each record's event on a line, followed by the
        type and message of any exception it carries."""
        content = self._log_content(dag_id, run_id, task_id, try_number)
        if isinstance(content, str):
            return content
        lines = []
        for item in content:
            if not isinstance(item, dict):
                lines.append(str(item))
                continue
            lines.append(str(item.get("event", "")))
            for detail in item.get("error_detail") or []:
                if isinstance(detail, dict):
                    lines.append(f"{detail.get('exc_type')}: {detail.get('exc_value')}")
        return "\n".join(lines)

    def asset_events(self, source_dag_id: str) -> list[dict]:
        """The asset events a DAG's tasks emitted (oldest first)."""
        return self._pages(
            "/api/v2/assets/events", "asset_events", "timestamp", source_dag_id=source_dag_id
        )

    def wait_for_runs(
        self,
        dag_id: str,
        run_ids: Iterable[str],
        timeout: float = 600.0,
        poll: float = 0.25,
        echo: Callable[[str], None] | None = print,
    ) -> dict[str, str]:
        """Wait until every run is success/failed; returns {run_id: state}.

        Looks every `poll` seconds for the first SLOW_POLL_AFTER_S, then once a second (or
        every `poll`, if longer): a small batch's run ends about a second after its trigger,
        and whoever triggers the next one when it ends (`onceflow trigger` in a loop) waits
        for this look. Each look is a request to the API server (a few ms of one of its
        workers, which the tasks' Execution API calls share): pass a longer `poll` for a
        wait that need not end at once (the bench's small batch does).
        Prints a line whenever a run changes state. Raises AirflowTimeout (a TimeoutError)
        listing the runs still unfinished.
        """
        run_ids = list(run_ids)
        states: dict[str, str | None] = dict.fromkeys(run_ids)
        start = time.monotonic()
        while True:
            for run_id in run_ids:
                if states[run_id] in FINAL_STATES:
                    continue
                state = self.get_run(dag_id, run_id).get("state")
                if state != states[run_id] and echo is not None:
                    echo(f"[{time.monotonic() - start:6.1f}s] {dag_id} {run_id}: {state}")
                states[run_id] = state
            if all(s in FINAL_STATES for s in states.values()):
                return {k: str(v) for k, v in states.items()}
            if time.monotonic() - start >= timeout:
                pending = {k: v for k, v in states.items() if v not in FINAL_STATES}
                raise AirflowTimeout(
                    f"runs of DAG {dag_id!r} not finished after {timeout:.0f}s: {pending}",
                    url=self.url,
                )
            waited = time.monotonic() - start
            time.sleep(poll if waited < SLOW_POLL_AFTER_S else max(poll, 1.0))


def airflow_client(settings: Settings) -> AirflowClient:
    """The client of ONCEFLOW_AIRFLOW_URL with ONCEFLOW_AIRFLOW_USER's login."""
    url = settings.airflow_url
    if not (settings.airflow_user and settings.airflow_password):
        raise ConfigError(
            f"no login for Airflow's API server at {url}: set ONCEFLOW_AIRFLOW_USER and "
            "ONCEFLOW_AIRFLOW_PASSWORD"
        )
    return AirflowClient(url, settings.airflow_user, settings.airflow_password)
