"""Evaluation: datasets, partitions, the paper's models, the plaintext FL simulator,
backdoor and membership-inference attacks, metrics, comparison tables and plots.

Modules: `datasets`, `partition`, `models`, `training` (local SGD, FedAvg), `simulator`
(Stage I history), `oracle` (GradientOracle), `probe` (ModelProbe), `attacks`, `metrics`,
`experiment` (run and measure strategies), `compare` (table, figure), `mpc_run` (a
strategy on the two-party cluster). `model_hash` and `uploads` are numpy-only, so the
server and the client SDK may import them without torch.
"""
