"""The one-command demo (`make demo`, `starfish demo`): the whole system on one machine.

dealer + party0 + party1 run as processes; simulated clients (threads, each a real
`client_sdk.Client` over TLS) train the paper's CNN on real MNIST with one backdoored
client; an admin files the unlearn request over RPC and follows the job; the demo then
compares TER, BA-ASR and MIA-ASR before unlearning, after Starfish-2PC and for a plaintext
retrain, lists time and bytes per step and writes a JSON report and plots.

Modules: `demo_config` (settings and what is scaled), `processes` (the services on loopback), `fleet` (SDK
clients), `stage1` (training through the service), `unlearn` (admin RPC and job stream),
`reference` (retrain and metrics), `demo_report` (tables, JSON, plots), `demo_run` (the steps).
"""
