"""The FastAPI app the plugin mounts at /onceflow: ledger pages, JSON API and metrics.

Airflow does not protect plugin apps, so every route depends on `require_user`, which runs
Airflow's own `get_user` (Bearer JWT first, else the `_token` cookie the UI sets at login) and
then asks the auth manager whether the user may read the pipeline's DAG.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse
from fastapi.security import HTTPAuthorizationCredentials
from fastapi.security.utils import get_authorization_scheme_param
from starlette.exceptions import HTTPException as StarletteHTTPException

from onceflow.config.pipeline import PipelineConfig
from onceflow.errors import ConfigError, UnknownTxidError
from onceflow.ledger.states import BatchState
from onceflow.settings import Settings
from onceflow.ui import data, html, metrics
from onceflow.ui.batch_detail import batch_page
from onceflow.ui.links import Links
from onceflow.ui.overview import overview_page
from onceflow.ui.pipeline_ledger import ledger_page

MOUNT = "/onceflow"
METRICS_WORKERS = 8  # pipelines whose metrics one scrape collects at a time
# how long a scrape waits for its clusters' end offsets (one call per cluster), inside
# Prometheus's default scrape timeout of 10 s; a pipeline whose broker has not answered by
# then shows no lag and onceflow_broker_up 0
METRICS_BROKER_TIMEOUT = 8.0


# -- authentication and authorization -----------------------------------------------------------


async def require_user(request: Request) -> Any:
    """The authenticated Airflow user, exactly as Airflow's REST API resolves it.

    Missing or expired token -> 401, invalid token -> 403 (raised by Airflow's get_user).
    Its parameters differ between Airflow releases: each is handed what its name asks for
    (the request, the bearer credentials; an OAuth token, the same header, as none). Airflow
    3.1's reads no request (its UI's middleware hands the `_token` cookie on as a header,
    which a plugin app never sees): there the bearer token, else the cookie, goes to the same
    resolver. Imported lazily: plugin files are also imported by the scheduler and tasks.
    """
    import inspect

    from airflow.api_fastapi.core_api import security

    scheme, token = get_authorization_scheme_param(request.headers.get("Authorization"))
    bearer = (
        HTTPAuthorizationCredentials(scheme=scheme, credentials=token)
        if scheme.lower() == "bearer" and token
        else None
    )
    params = inspect.signature(security.get_user).parameters
    if "request" in params:
        given = {"request": request, "bearer_credentials": bearer}
        return await security.get_user(**{name: given.get(name) for name in params})
    cookie = request.cookies.get("_token")  # Airflow 3.1
    return await security.resolve_user_from_token(bearer.credentials if bearer else cookie)


def airflow_can_read_dag(user: Any, dag_id: str) -> bool:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    return get_auth_manager().is_authorized_dag(
        method="GET", details=DagDetails(id=dag_id), user=user
    )


def login_url(next_url: str) -> str | None:
    try:
        from airflow.api_fastapi.app import get_auth_manager

        return get_auth_manager().get_url_login(next_url=next_url)
    except Exception:  # noqa: BLE001 - outside the api-server there is no login page
        return None


User = Annotated[Any, Depends(require_user)]


# -- helpers -------------------------------------------------------------------------------------


def links(request: Request) -> Links:
    """Links relative to where the app is mounted (root_path), so a base_url prefix works."""
    root = request.scope.get("root_path", "") or MOUNT
    airflow = root[: -len(MOUNT)] if root.endswith(MOUNT) else ""
    return Links(root, airflow)


def wants_html(request: Request) -> bool:
    path = request.url.path
    return "/api/" not in path and not path.endswith("/metrics")


def json(content: Any, status_code: int = 200) -> JSONResponse:
    return JSONResponse(jsonable_encoder(content), status_code=status_code)


class App:
    """Route handlers bound to a settings source and an authorization check (both swappable
    in tests that run the app without Airflow's api-server)."""

    def __init__(
        self,
        settings: Callable[[], Settings] = data.settings,
        can_read_dag: Callable[[Any, str], bool] = airflow_can_read_dag,
    ):
        self.settings = settings
        self.can_read_dag = can_read_dag

    def pipeline(self, user: Any, name: str) -> PipelineConfig:
        """The pipeline, if the user may read its DAG: one they may not is answered as one
        that does not exist (404 both), so the answer tells no one which pipelines exist."""
        cfg = data.pipelines(self.settings()).get(name)
        if cfg is None or not self.can_read_dag(user, cfg.dag_id):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no pipeline named {name!r}")
        return cfg

    def readable(self, user: Any) -> list[PipelineConfig]:
        pipelines = data.pipelines(self.settings()).values()
        return sorted(
            (c for c in pipelines if self.can_read_dag(user, c.dag_id)), key=lambda c: c.name
        )


def create_app(
    settings: Callable[[], Settings] = data.settings,
    can_read_dag: Callable[[Any, str], bool] = airflow_can_read_dag,
) -> FastAPI:
    h = App(settings, can_read_dag)
    api = FastAPI(
        title="Onceflow ledger",
        # every route requires Airflow's authentication; no open docs or schema endpoints
        dependencies=[Depends(require_user)],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    @api.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        headers = getattr(exc, "headers", None)
        if not wants_html(request):
            return JSONResponse(
                {"detail": exc.detail}, status_code=exc.status_code, headers=headers
            )
        ln = links(request)
        extra = ""
        if exc.status_code == status.HTTP_401_UNAUTHORIZED:
            # relative: an absolute one would carry the request's Host header, which the
            # client chooses, into the login page's redirect
            path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            url = login_url(path)
            if url:
                extra = f"<p>{html.a(url, 'Log in to Airflow')}</p>"
        title = {401: "Not logged in", 403: "Forbidden", 404: "Not found"}.get(
            exc.status_code, "Error"
        )
        return HTMLResponse(
            html.message_page(title, str(exc.detail), ln, extra),
            status_code=exc.status_code,
            headers=headers,
        )

    @api.exception_handler(ConfigError)
    async def config_error(request: Request, exc: ConfigError):
        detail = f"pipelines file: {exc}"
        if not wants_html(request):
            return JSONResponse({"detail": detail}, status_code=500)
        return HTMLResponse(
            html.message_page("Configuration error", detail, links(request)), status_code=500
        )

    def unknown_txid(request: Request, pipeline: str, exc: UnknownTxidError) -> HTMLResponse:
        """The 404 page of a txid the ledger does not hold, with the known ones nearest to it
        (views.require_txid)."""
        text = f"{exc}. A run from another DAG belongs to another ledger."
        ln = links(request)
        extra = (
            f"<p>{html.a(ln.pipeline(pipeline), 'Back to the ledger of ' + html.e(pipeline))}</p>"
        )
        return HTMLResponse(
            html.message_page("Not in the ledger (yet)", text, ln, extra), status_code=404
        )

    # -- HTML ------------------------------------------------------------------------------------

    @api.get("/", response_class=HTMLResponse)
    def overview(request: Request, user: User) -> HTMLResponse:
        cfgs = h.readable(user)
        ends = data.pipelines_ends(cfgs)  # one broker call per cluster, for every lag
        items = [data.pipeline_overview(c, ends.get(c.name)) for c in cfgs]
        return HTMLResponse(overview_page(items, links(request)))

    @api.get("/pipelines/{pipeline}", response_class=HTMLResponse)
    def pipeline_ledger(
        request: Request,
        user: User,
        pipeline: str,
        limit: Annotated[int, Query(ge=1, le=1000)] = 50,
        before: Annotated[int | None, Query(ge=1)] = None,
        partitions: Annotated[str, Query(pattern="^(all|topics)$")] = "topics",
    ) -> HTMLResponse:
        cfg = h.pipeline(user, pipeline)
        view = data.ledger_view(cfg, limit, before)
        return HTMLResponse(ledger_page(view, links(request), every_partition=partitions == "all"))

    @api.get("/pipelines/{pipeline}/batches/{txid}", response_class=HTMLResponse)
    def batch_entry(
        request: Request,
        user: User,
        pipeline: str,
        txid: str,
        dl_offset: Annotated[int, Query(ge=0)] = 0,
        dl_limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> HTMLResponse:
        cfg = h.pipeline(user, pipeline)
        try:
            view = data.batch_view(cfg, txid, dl_limit, dl_offset)
        except UnknownTxidError as exc:
            return unknown_txid(request, pipeline, exc)
        ln = links(request)

        def dl_url(offset: int) -> str:
            query = urlencode({"dl_offset": offset, "dl_limit": dl_limit})
            return f"{ln.batch(pipeline, txid)}?{query}#dead-letters"

        return HTMLResponse(batch_page(view, ln, dl_url))

    # Targets of the external views on Airflow's DAG, DAG run and task instance pages, which
    # only know {DAG_ID}, {RUN_ID} and {TASK_ID}: map dag id -> pipeline and redirect.

    def not_onceflow(request: Request, dag_id: str) -> HTMLResponse:
        text = (
            f"DAG {dag_id!r} is not an Onceflow pipeline (their DAG ids are onceflow_<pipeline>)."
        )
        return HTMLResponse(html.message_page("Not an Onceflow DAG", text, links(request)))

    @api.get("/dags/{dag_id}", response_class=HTMLResponse, response_model=None)
    def from_dag(request: Request, user: User, dag_id: str) -> HTMLResponse | RedirectResponse:
        pipeline = data.pipeline_of_dag(dag_id)
        if pipeline is None:
            return not_onceflow(request, dag_id)
        h.pipeline(user, pipeline)
        return RedirectResponse(
            links(request).pipeline(pipeline), status.HTTP_307_TEMPORARY_REDIRECT
        )

    @api.get("/dags/{dag_id}/runs/{run_id}", response_class=HTMLResponse, response_model=None)
    def from_run(
        request: Request, user: User, dag_id: str, run_id: str
    ) -> HTMLResponse | RedirectResponse:
        pipeline = data.pipeline_of_dag(dag_id)
        if pipeline is None:
            return not_onceflow(request, dag_id)
        h.pipeline(user, pipeline)
        return RedirectResponse(
            links(request).batch(pipeline, run_id), status.HTTP_307_TEMPORARY_REDIRECT
        )

    @api.get(
        "/dags/{dag_id}/runs/{run_id}/tasks/{task_id}",
        response_class=HTMLResponse,
        response_model=None,
    )
    def from_task(
        request: Request, user: User, dag_id: str, run_id: str, task_id: str
    ) -> HTMLResponse | RedirectResponse:
        return from_run(request, user, dag_id, run_id)

    # -- JSON ------------------------------------------------------------------------------------

    @api.get("/api/pipelines")
    def api_pipelines(user: User) -> JSONResponse:
        cfgs = h.readable(user)
        return json({"pipelines": [data.pipeline_overview(c) for c in cfgs]})

    @api.get("/api/pipelines/{pipeline}")
    def api_pipeline(user: User, pipeline: str) -> JSONResponse:
        cfg = h.pipeline(user, pipeline)
        return json(data.pipeline_overview(cfg))

    @api.get("/api/pipelines/{pipeline}/batches")
    def api_batches(
        user: User,
        pipeline: str,
        limit: Annotated[int, Query(ge=1, le=1000)] = 50,
        before: Annotated[int | None, Query(ge=1)] = None,
    ) -> JSONResponse:
        cfg = h.pipeline(user, pipeline)
        from onceflow.ledger import views

        return json(
            {
                "pipeline": cfg.name,
                "batches": views.batches(
                    data.ledger_of(cfg), cfg.name, limit=limit, before_seq=before
                ),
                "blocked": views.commit_block(data.ledger_of(cfg), cfg.name),
            }
        )

    @api.get("/api/pipelines/{pipeline}/partitions")
    def api_partitions(user: User, pipeline: str) -> JSONResponse:
        cfg = h.pipeline(user, pipeline)
        return json(data.partitions(cfg))

    @api.get("/api/pipelines/{pipeline}/losses")
    def api_losses(user: User, pipeline: str) -> JSONResponse:
        """Loss events, operator resets and the batches those resets abandoned."""
        cfg = h.pipeline(user, pipeline)
        from onceflow.ledger import views

        return json(
            {
                "pipeline": cfg.name,
                "loss_events": views.losses(data.ledger_of(cfg), cfg.name),
                "resets": views.resets(data.ledger_of(cfg), cfg.name),
                BatchState.ABANDONED: views.abandoned(data.ledger_of(cfg), cfg.name),
            }
        )

    @api.get("/api/pipelines/{pipeline}/batches/{txid}")
    def api_batch(user: User, pipeline: str, txid: str) -> JSONResponse:
        cfg = h.pipeline(user, pipeline)
        try:
            view = data.batch_view(cfg, txid, dl_limit=0)
        except UnknownTxidError as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
        view["dead_letters"] = {"total": view["dead_letters"]["total"]}
        return json(view)

    @api.get("/api/pipelines/{pipeline}/batches/{txid}/dead-letters")
    def api_dead_letters(
        user: User,
        pipeline: str,
        txid: str,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> JSONResponse:
        cfg = h.pipeline(user, pipeline)
        from onceflow.ledger import views

        try:
            page = views.dead_letter_page(data.ledger_of(cfg), cfg.name, txid, limit, offset)
        except UnknownTxidError as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
        return json({"pipeline": cfg.name, "txid": txid, **page})

    @api.get("/metrics", response_class=PlainTextResponse)
    def metrics_text(user: User) -> PlainTextResponse:
        """Prometheus text format for every pipeline the user may read (scrape with a
        bearer token: the endpoint is protected like the rest)."""
        cfgs = h.readable(user)
        ends = data.pipelines_ends(cfgs, timeout=METRICS_BROKER_TIMEOUT)

        def collect(cfg: PipelineConfig) -> metrics.PipelineMetrics:
            return metrics.collect(data.ledger_of(cfg), cfg.name, ends[cfg.name].ends)

        # the pipelines' ledgers side by side: a scrape of thirty of them one after another
        # outlasted a scraper's 30 s timeout
        with ThreadPoolExecutor(METRICS_WORKERS, thread_name_prefix="onceflow-metrics") as pool:
            collected = list(pool.map(collect, cfgs))
        return PlainTextResponse(metrics.render(collected), media_type=metrics.CONTENT_TYPE)

    return api
