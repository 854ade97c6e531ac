"""`python -m party1 [--config F]`: run party1 (default config: party1/party1.toml)."""

import sys

from server.main import main

sys.exit(main(1))
