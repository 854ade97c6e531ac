"""The system stood up and run on one machine, shared by the CLI and the benchmarks.

`local` (the whole deployment on loopback: certificates, credentials, configs and the three
operators' processes), `demo/` (the one-command demo), `multihost/` (the three-operator recipe
of `deploy/` run on emulated hosts), `netlab/` (the emulated hosts: network namespaces, delay
lines, shaping, capture; standard library only) and `report_page/` (the job report page the demo and
`starfish admin` write). Imports the packages below it, never the CLI (`starfish_cli/`) or `bench/`.
"""
