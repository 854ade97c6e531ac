"""A party process whose minimum cohort is set in code (`python low_cohort_party.py CONFIG K`).

The party config file refuses `[privacy] min_cohort` below 2, so the attack tests build a
party with k = 1 here: the file's configuration with `PrivacyConfig(min_cohort=K)`, then the
same runtime as `python -m partyN` (serves until SIGTERM).
"""

from __future__ import annotations

import dataclasses
import sys

from server.tls_floor import require_tls13


def main(config_path: str, k: int) -> int:
    require_tls13()  # before gRPC loads, as in `python -m partyN` (server.tls_floor)
    from server import logs
    from server.config import PrivacyConfig, load_config
    from server.runtime import PartyServer

    cfg = dataclasses.replace(load_config(config_path), privacy=PrivacyConfig(min_cohort=k))
    logs.configure(cfg.name, cfg.observability.log_format, "INFO")
    PartyServer(cfg).run_until_signal()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
