"""Flower reads its telemetry switch when first imported: turn it off before any test imports flwr."""

import starfish_flower.offline  # noqa: F401
