"""Several replicas: routers, affinity, model pools, regions (fleet), the autoscaler and the network."""
