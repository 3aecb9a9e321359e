"""Several replicas: routers, affinity, model pools, regions (fleet), the autoscaler and the network,
and the seam they plug into a run by (:mod:`simulator.cluster.extension`)."""
