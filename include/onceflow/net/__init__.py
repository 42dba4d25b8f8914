"""Onceflow's calls to HTTP services outside Kafka and PostgreSQL (a schema registry, an OAuth
token endpoint): one client, bounded in time and size (bounded_http)."""
