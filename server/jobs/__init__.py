"""Stage II in the service: unlearning jobs run under 2PC by both parties (docs/JOBS.md).

* the `[jobs]` settings are `server.job_config` (read with the party's configuration);
* `jobstore` — durable job queue and status (SQLite beside the party's store);
* `validation` — checks an unlearn request against the stored history;
* `store_history`, `oracle` — the store-backed `SharedHistory` and the task-posting
  `GradientOracle` a worker hands to the strategy;
* `checkpoints` — per-round job state (public JSON/npy, own shares as raw int64);
* `attempt` — what a worker (`server.workers`) runs for one session attempt of a job;
* `runner`, `manager` (party0), `follower` (party1) — the job runners;
* `job_report` — the job report and its summary;
* `services` — the admin and peer RPC handlers of jobs.

See docs/JOBS.md.
"""
