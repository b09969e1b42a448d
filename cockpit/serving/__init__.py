"""HTTP to the inference server: readiness and metrics probes (`probes`) and the load generator
(`loadgen`) of `cockpit bench`. The only place besides the transports that speaks httpx; core,
model and backends never import it (import-linter contract in pyproject.toml).
"""
