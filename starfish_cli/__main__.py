"""`python -m starfish_cli ...`: the `starfish` command without its console script."""

import sys

from starfish_cli.entry import main

if __name__ == "__main__":
    sys.exit(main())
