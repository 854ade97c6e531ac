"""An emulated multi-host network on one Linux machine, for tests and benchmarks.

Each host (party0, party1, the dealer, the clients, a stranger) is a network namespace
with one interface `eth0` and its own address; the hosts are joined by veth pairs to a
bridge that lives in a switch namespace of its own, so nothing touches the machine's own
interfaces or routes. Each link can delay packets (`harness.netlab.delay_line`, a user-space
relay: the kernel here has no `netem`) and cap bandwidth (`tbf` qdiscs,
`harness.netlab.shaping`); `harness.netlab.probe` measures what a link really does before a measurement
trusts it; `harness.netlab.capture` records every frame entering the bridge and `harness.netlab.flows`
reassembles the TCP streams to check what crossed the wire.

Needs root and `ip` (iproute2); `tcpdump` for captures. `harness.netlab.lab.unavailable()` says
why a lab cannot be built here.
"""
