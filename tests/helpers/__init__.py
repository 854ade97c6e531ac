"""The helpers the test folders share, imported as `helpers.<module>` (pytest puts tests/ on the path).

backdoor_fl, synthetic_fl, stage2_attack_fl, eval_federations: small federations of the algorithm,
attack and evaluation tests; twoparty_cases, bench_cases, input_check_pair, plane_helpers: party-side
functions and endpoints of the MPC tests; server_fixtures, stage1_helpers, stage2_fixtures,
store_rounds, poisoned_inputs, fault_helpers, storage_helpers, metrics_scrape, tls_handshake,
evidence_fixtures: deployments, rounds, faults and probes of the service tests; plumbing_schedule:
the cheap Starfish schedule of the jobs those tests file; fuzz_deployment,
fuzz_messages: the fuzz tests; flower_app, flower_run: the Flower tests; multihost_world: the
emulated-host tests; source_tree: the imports the architecture tests read.
"""
