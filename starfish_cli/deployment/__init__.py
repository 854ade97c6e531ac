"""One deployment description (`deploy/deployment.toml`) rendered into each operator's bundle."""
