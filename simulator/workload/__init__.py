"""Traffic: arrival processes, token-length distributions, shared prefixes and sessions, client levers."""
