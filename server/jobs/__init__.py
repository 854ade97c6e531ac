"""Stage II in the service: unlearning jobs run under 2PC by both parties (DESIGN §2, §6).

* `config` — the `[jobs]` settings;
* `jobstore` — durable job queue and status (SQLite beside the party's store);
* `validation` — checks an unlearn request against the stored history;
* `history`, `oracle` — the store-backed `SharedHistory` and the task-posting
  `GradientOracle` a worker hands to the strategy;
* `agree` — public agreements of the two workers over their session;
* `checkpoints` — per-round job state (public JSON/npy, own shares as raw int64);
* `worker`, `dealer` — the per-attempt processes (`python -m server.jobs.worker|dealer`);
* `process` — starting them ahead of need and talking to a worker (JSON lines over pipes);
* `runner`, `manager` (party0), `follower` (party1) — the job runners;
* `report` — the job report and its summary;
* `services` — the admin and peer RPC handlers of jobs.

See docs/JOBS.md.
"""
