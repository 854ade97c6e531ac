"""Keep a Flower run inside the deployment: no usage reports leave the machine, and Ray
listens on loopback only.

Flower sends telemetry events and Ray usage statistics to their makers unless told not to,
and Ray binds its services (unauthenticated) to the machine's outward address unless told
it is a single-machine cluster. All three read their switch from the environment when
first imported (Ray's processes inherit the driver's environment). Importing
`starfish_flower` sets them unless the environment already says otherwise; import it
before `flwr` and `ray`, or set the variables yourself.

Ray's dashboard process still probes cloud metadata addresses (169.254.169.254 and a DNS
name) whatever these switches say; `starfish_flower.sandbox` runs a simulation where
nothing but loopback exists.
"""

import os

SWITCHES = {
    "FLWR_TELEMETRY_ENABLED": "0",  # Flower's telemetry events
    "RAY_USAGE_STATS_ENABLED": "0",  # Ray's usage statistics
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # Ray: a single-machine cluster on 127.0.0.1
}

for _name, _value in SWITCHES.items():
    os.environ.setdefault(_name, _value)
