"""`python -m party0 [--config F]`: run party0 (default config: party0/party0.toml)."""

import sys

from server.main import main

sys.exit(main(0))
