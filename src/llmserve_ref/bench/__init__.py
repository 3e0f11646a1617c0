"""Benchmarking a server from outside: the client, its statistics, a harness, a fake server."""
