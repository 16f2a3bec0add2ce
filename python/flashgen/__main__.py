"""`flashgen ...` / `python -m flashgen ...`: the packaged command-line tool (README, "The flashgen tool")."""

import os
import sys

from ._aot import cli_path


def main() -> None:
    path = cli_path()
    if not os.access(path, os.X_OK):
        sys.exit(f"flashgen: the packaged CLI is missing at {path}; reinstall the package")
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
