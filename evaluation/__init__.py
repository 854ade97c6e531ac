"""Evaluation: datasets, partitions, the paper's models, the plaintext FL simulator,
backdoor and membership-inference attacks, metrics, comparison tables and plots.

Modules: `datasets`, `partition`, `models`, `training` (local SGD, FedAvg), `simulator`
(Stage I history), `simulated_oracle` (SimulatedOracle), `dataset_probe` (DatasetProbe), `attacks`,
`unlearning_metrics`, `experiment` (run and measure strategies), `compare` (table, figure), `mpc_run` (a
strategy on the two-party cluster). What a simulated client uploads (‖g‖, δ) is
computed by the client SDK's own `client_sdk.stats`; models are hashed by `proto.wire`.
"""
