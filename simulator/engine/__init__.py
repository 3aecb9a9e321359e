"""One replica's engine: the request table, paged KV memory and prefix cache, the schedulers
(continuous batching and the other policies), deadlines, and the SimPy engine loop."""
