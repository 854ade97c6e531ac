"""The worker processes of a party: one per MPC session attempt, below Stage I and the jobs.

* `process` — the worker spec, starting workers ahead of need (`Standby`) and talking to one
  (JSON lines over pipes); `worker` — the worker process itself (`python -m server.workers.worker`);
  `parent_link` — its pipe to the party;
* `failures` — which process made a session attempt fail;
* `agree` — public agreements of the two workers over their open session.

Stage I's clip sessions (`server.stage1_clip`) and Stage II's jobs (`server.jobs`) both run
their sessions here; neither imports the other. See docs/JOBS.md.
"""
