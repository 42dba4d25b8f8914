"""`python -m onceflow_dev`: the checkout's `onceflow-dev` command (onceflow_dev.cli), which
`make setup` writes into the venv as a script running this."""

import sys

from onceflow_dev.cli import main

if __name__ == "__main__":
    sys.exit(main())
