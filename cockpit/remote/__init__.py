"""Cockpit's reach onto hosts and login nodes: the stdlib programs sent there (`programs/`) and
their clients, over any Transport.

`host.HostOps` runs the host program's operations (launch, find, stop, follow, stacks) with the
shared call/retry code (`calls`), `login.SlurmLogin` runs the login-node program's (submit, find,
query, cancel) on the same code. The telemetry agent's client is cockpit/telemetry/client.py. Nothing
here knows an engine; nothing here imports the supervisor, the UI or the commands.
"""
