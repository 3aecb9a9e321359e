"""Running a scenario: resolve its references, wire replicas and routers, simulate, collect records."""
