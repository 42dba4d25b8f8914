"""The chaos harness behind `onceflow chaos` / `make chaos` (onceflow.cli.local_stack runs
`run(Options(...))`); its modules say what each part is for."""

from onceflow_dev.chaos.harness import Options, run

__all__ = ["Options", "run"]
