"""`onceflow-dev`, a checkout's own command line: the embedded local stack (up, down, status),
its demo records (produce), the runtime's variables for it (env), the demo and the chaos harness. `make setup` writes the venv's
`onceflow-dev` script, which runs `python -m onceflow_dev`; the wheel ships none of it, and
the runtime's commands stay `onceflow`'s (onceflow.cli.main).

Exit codes as `onceflow`'s: 2 for a usage error or an OnceflowError (its message on stderr,
after the command's name), 1 for a command's own failure (a demo run that did not succeed,
a chaos run that was not exactly-once), 130 for Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from collections.abc import Callable, Iterator, Sequence

from onceflow.compat.versions import check_versions
from onceflow.errors import OnceflowError

from onceflow_dev.commands import cmd_chaos, cmd_down, cmd_produce, cmd_status, cmd_up
from onceflow_dev.demo import cmd_demo
from onceflow_dev.settings import StackSettings

# a command: the parsed arguments and the settings in, the exit code out
Command = Callable[[argparse.Namespace, StackSettings], int]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="onceflow-dev",
        description="A checkout's own commands: the embedded local stack on 127.0.0.1, demo "
        "records, the demo and the chaos harness (`onceflow` runs a pipeline's operations).",
        epilog="Quick start: onceflow-dev up && onceflow-dev demo",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func: Command, help_: str, example: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_, description=help_, epilog=f"example: {example}")
        sp.set_defaults(func=func)
        return sp

    add(
        "up",
        cmd_up,
        "Start the embedded stack on 127.0.0.1 (PostgreSQL, broker, Airflow); idempotent.",
        "onceflow-dev up",
    )
    add(
        "down",
        cmd_down,
        "Stop every service of the embedded stack by its PID.",
        "onceflow-dev down",
    )
    add(
        "env",
        cmd_env,
        "Print the runtime's ONCEFLOW_* variables for this stack, as shell exports: `onceflow` "
        "in that shell then reads the stack's ledger, broker and Airflow.",
        'eval "$(onceflow-dev env)" && onceflow status --pipeline orders',
    )
    sp = add(
        "status",
        cmd_status,
        "Show the stack's services, the Airflow UI URL and login.",
        "onceflow-dev status --json",
    )
    sp.add_argument("--json", action="store_true", help="machine-readable output")
    sp = add(
        "produce",
        cmd_produce,
        "Produce demo records to the pipeline's topic: the records of the `sample` function "
        "in the transform's module (onceflow.transforms).",
        "onceflow-dev produce --pipeline inventory --count 20000",
    )
    sp.add_argument("--pipeline", help="pipeline name (default: the only one configured)")
    sp.add_argument("--topic", help="topic (default: the pipeline's first topic)")
    sp.add_argument(
        "--count", type=int, default=100_000, help="records to produce (default 100000)"
    )
    sp.add_argument(
        "--partitions", type=int, default=4, help="partitions when creating the topic (default 4)"
    )
    sp.add_argument("--seed", type=int, default=42, help="random seed (default 42)")
    sp.add_argument(
        "--start", type=int, default=0, help="first record number, to continue a series (default 0)"
    )
    sp = add(
        "demo",
        cmd_demo,
        "Run the shipped example pipelines on the running stack (from a checkout): "
        "produce their sample records (continuing each series), trigger the runs each backlog needs, audit each "
        "with --reread and print a summary; exits 1 unless every run succeeded and every "
        "audit says exactly-once.",
        "onceflow-dev up && onceflow-dev demo",
    )
    sp.add_argument(
        "--timeout", type=float, default=1800, help="seconds to wait for the runs (default 1800)"
    )
    sp.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="produce this share of each pipeline's demo records (default 1.0; e.g. 0.05 for a "
        "quick run)",
    )
    sp = add(
        "chaos",
        cmd_chaos,
        "Run the chaos harness on a dedicated local stack: faults injected while runs go "
        "through the scheduler; writes chaos-report.json (exit 0 only for exactly-once).",
        "onceflow-dev chaos --pipeline inventory --batches 200 --seed 1 --max-minutes 120",
    )
    sp.add_argument(
        "--pipeline",
        help="a pipeline of the pipelines file (its transform and sink, chaos's batch size and "
        "topic; a pipeline of change events its own topics, of the chaos stack's shop "
        "database; default: the orders example as tests/chaos_pipelines.toml's `chaos`)",
    )
    sp.add_argument(
        "--batches", type=int, default=200, help="committed batches to reach (default 200)"
    )
    sp.add_argument("--seed", type=int, default=1, help="seed of the fault schedule (default 1)")
    sp.add_argument(
        "--max-minutes",
        type=float,
        default=120.0,
        help="time budget; faults stop at 80%% of it, then the lag drains (default 120)",
    )
    sp.add_argument("--keep", action="store_true", help="leave the chaos stack running afterwards")
    sp.add_argument(
        "--stack",
        type=int,
        default=0,
        choices=range(10),
        metavar="N",
        help="chaos stack slot: N > 0 uses .onceflow/chaos-N and ports +10N, so two runs can go "
        "side by side (default 0: .onceflow/chaos, 25435/29095/28083)",
    )
    sp.add_argument(
        "--lake-s3",
        action="store_true",
        help="a lake sink's warehouse on an S3 emulator (moto's server) instead of the chaos "
        "stack's folder",
    )
    sp.add_argument(
        "--process-mode",
        choices=("spark-submit", "connect"),
        default="spark-submit",
        help="how the pipeline processes: a spark-submit per attempt (default), or in a "
        "session of the chaos stack's Spark Connect server, which then is killed too "
        "(fault 11)",
    )
    sp.add_argument("--report", help="report path (default: chaos-report.json at the project root)")
    sp.add_argument(
        "--faults",
        help="only these fault kinds, e.g. 3,7 (development; such a run is never complete)",
    )
    return p


def cmd_env(args: argparse.Namespace, settings: StackSettings) -> int:
    for name, value in settings.runtime_env().items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


@contextlib.contextmanager
def runtime_env(settings: StackSettings) -> Iterator[None]:
    """The runtime's variables for this stack, set while a command runs: what the runtime's
    calls in this process (the demo's audit, produce) read; restored after."""
    runtime = settings.runtime_env()
    saved = {name: os.environ.get(name) for name in runtime}
    os.environ.update(runtime)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_versions()
        settings = StackSettings.from_env()
        with runtime_env(settings):
            return args.func(args, settings)
    except OnceflowError as e:
        print(f"onceflow-dev {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
