"""The three-operator deployment recipe (`deploy/`) run on emulated hosts (`harness.netlab`).

`recipe` turns the recipe's configs and systemd units into a runnable deployment under one
directory; `hosts` starts each operator's service inside its own network namespace with the
unit's command line; `clients_host` is the client process (Stage I and task answering, and the
admin's unlearn request) that runs inside the clients' namespace. Used by the namespace
integration test and by the multi-host benchmark.
"""
