"""Stage II in the service: unlearning jobs run under 2PC by both parties (DESIGN §2, §6).

* `jobstore` — durable job queue and status (SQLite beside the party's store);
* `validation` — checks an unlearn request against the stored history;
* `history`, `oracle` — the store-backed `SharedHistory` and the task-posting
  `GradientOracle` a worker hands to the strategy;
* `checkpoints` — per-round job state (public JSON/npy, own shares as raw int64);
* `worker` — the per-job worker process (`python -m server.jobs.worker`);
* `process` — spawning and talking to a worker (JSON lines over pipes) and the dealer;
* `manager` (party0) and `follower` (party1) — the job runners;
* `services` — the admin and peer RPC handlers of jobs.

See docs/JOBS.md.
"""
