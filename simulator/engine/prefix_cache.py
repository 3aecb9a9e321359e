"""Automatic prefix caching with vLLM v1 semantics, on top of the count-based KV cache.

Block identities (:class:`~simulator.workload.block_hashes.BlockHashes`): every full block of a
request's token sequence has an integer id standing for its whole prefix, as vLLM's chained block
hashes do; the workload draws them, the cache compares them.

Cache semantics (vLLM v1 ``KVCacheManager`` / ``BlockPool``):

* on admission, the longest run of *leading* full blocks already cached is a hit: those blocks are
  shared (reference-counted), neither recomputed nor newly allocated; at most
  ``(num_tokens - 1) // block_size`` blocks can hit, so the last prompt token is always computed;
* the full blocks the request computes are hashed when scheduled: at admission, and with chunked
  prefill as each chunk is scheduled (``admit_chunk``, ``register``), so a request admitted later
  in the same step can hit them, as in vLLM; blocks its decode steps fill are hashed when it finishes
  or is preempted (only that request or its own later turns can ever ask for them, and neither can
  before then, so this is exact for the workloads built here);
* a block whose reference count drops to 0 stays cached and counts as free but evictable; when new
  blocks are needed, free blocks without a hash go first, then cached blocks are evicted in LRU
  order (a request's blocks are queued last block first, as vLLM frees them);
* decode steps only ever allocate private blocks, so a decode run's allocations and evictions are
  one bulk ``allocate`` (the LRU order makes the bulk and step-by-step results identical).
"""
from __future__ import annotations

from simulator.engine.kv_cache import KVCacheManager
from simulator.workload.block_hashes import BlockHashes


class PrefixCachingKVManager(KVCacheManager):
    """KV blocks with identities: shared, reference-counted, cached after release, LRU-evicted.

    ``num_used_blocks`` counts blocks some running request holds; ``num_free_blocks`` includes
    the ``num_evictable_blocks`` (cached, unreferenced), exactly as vLLM's free-block queue does.
    ``allocate`` takes unhashed free blocks first and evicts cached ones (LRU) for the rest.
    """

    __slots__ = ("hashes", "ref", "qpos", "num_evictable_blocks", "_buf", "_base", "_head",
                 "_held", "_registered", "hit_tokens", "query_tokens", "num_queries", "evictions")

    def __init__(self, num_gpu_blocks: int, block_size: int, hashes: BlockHashes) -> None:
        super().__init__(num_gpu_blocks, block_size)
        assert hashes.block_size == block_size
        self.hashes = hashes
        self.ref: list[int] = [-1] * hashes.num_ids
        """Per block id: -1 not cached, 0 cached and evictable, k >= 1 held by k running requests."""
        self.qpos: list[int] = [-1] * hashes.num_ids
        """Per block id: its position in the eviction queue while it is evictable (-1 otherwise, so
        that the list holds no position object for long)."""
        self.num_evictable_blocks = 0
        # Eviction queue: ids in LRU order in ``_buf[_head:]``; ``_buf[i]`` has position ``_base + i``.
        # A block revived by a hit leaves a tombstone (-1) in its slot.
        self._buf: list[int] = []
        self._base = self._head = 0
        self._held: dict[int, list[int]] = {}
        """Running request -> the cached block ids it holds a reference to."""
        self._registered: dict[int, int] = {}
        """Running request -> how many of its leading blocks have been offered to the cache."""
        self.hit_tokens = 0
        self.query_tokens = 0
        self.num_queries = 0
        self.evictions = 0

    # -- the pool ----------------------------------------------------------------------------------
    def allocate(self, num_blocks: int) -> bool:
        free = self.num_gpu_blocks - self.num_used_blocks
        if num_blocks > free:
            return False
        short = num_blocks - (free - self.num_evictable_blocks)
        if short > 0:
            self._evict(short)
        self.num_used_blocks += num_blocks
        return True

    def _evict(self, count: int) -> None:
        """Drop the ``count`` least recently freed cached blocks from the cache."""
        ref, buf = self.ref, self._buf
        self.num_evictable_blocks -= count
        self.evictions += count
        head = self._head
        qpos = self.qpos
        while count:
            block = buf[head]
            head += 1
            if block >= 0:                # -1: revived since it was queued
                ref[block] = -1
                qpos[block] = -1
                count -= 1
        if head > 4096 and 2 * head > len(buf):   # drop the consumed head of the queue
            del buf[:head]
            self._base += head
            head = 0
        self._head = head

    def _push(self, ids: list[int]) -> None:
        """Queue newly unreferenced blocks for eviction (``ids`` in eviction order)."""
        if not ids:
            return
        qpos, buf = self.qpos, self._buf
        pos = self._base + len(buf)
        for block in ids:
            qpos[block] = pos
            pos += 1
        buf.extend(ids)
        self.num_evictable_blocks += len(ids)

    # -- requests ------------------------------------------------------------------------------------
    def admit(self, rid: int, num_tokens: int, budget: int, num_computed_tokens: int | None = None) -> int:
        """Admit request ``rid`` whose first ``num_tokens`` tokens must be cached by the step's end.

        Returns the number of tokens found in the cache (a multiple of ``block_size``), or -1 when
        the tokens left to compute exceed ``budget`` or their blocks are not free (nothing changes).
        ``num_computed_tokens``, if given, must equal ``num_tokens`` (no swapped-in KV with prefix
        caching: refused in resolve).
        """
        assert num_computed_tokens is None or num_computed_tokens == num_tokens
        known, hit = self._lookup(rid, num_tokens)
        if num_tokens - hit * self.block_size > budget or not self._hold(rid, known, hit, num_tokens, num_tokens):
            return -1
        return hit * self.block_size

    def admit_chunk(self, rid: int, num_tokens: int, budget: int) -> tuple[int, int]:
        """Admit ``rid`` with ``num_tokens`` tokens to compute in chunks (chunked prefill, as vLLM v1):
        the leading cached blocks are hits, and a first chunk of at most ``budget`` of the other
        tokens gets blocks; the chunk's full blocks are cached at once. Returns ``(cached tokens,
        chunk tokens)``, or ``(-1, 0)`` when the blocks are not free (nothing changes then)."""
        known, hit = self._lookup(rid, num_tokens)
        cached = hit * self.block_size
        t = min(num_tokens - cached, budget)
        if not self._hold(rid, known, hit, cached + t, num_tokens):
            return -1, 0
        return cached, t

    def _lookup(self, rid: int, num_tokens: int) -> tuple[list[int], int]:
        """The ids of ``rid``'s full blocks and how many leading ones are cached (a hit never
        covers the last token: at most ``(num_tokens - 1) // block_size`` blocks)."""
        bs, ref = self.block_size, self.ref
        known = self.hashes.id_list(rid, num_tokens // bs)
        limit = min((num_tokens - 1) // bs, len(known))
        hit = 0
        while hit < limit and ref[known[hit]] >= 0:
            hit += 1
        return known, hit

    def _hold(self, rid: int, known: list[int], hit: int, end: int, num_tokens: int) -> bool:
        """Take ``known[:hit]`` from the cache and blocks for tokens ``hit * block_size .. end``;
        False (nothing changes) when they are not free. Counts a query of ``num_tokens``."""
        bs, ref = self.block_size, self.ref
        revived = [block for block in known[:hit] if ref[block] == 0] if hit else []
        new_blocks = -(-end // bs) - hit
        if new_blocks + len(revived) > self.num_gpu_blocks - self.num_used_blocks:
            return False
        if hit:
            for i in range(hit):
                ref[known[i]] += 1
            if revived:
                buf, qpos, base = self._buf, self.qpos, self._base
                for block in revived:
                    buf[qpos[block] - base] = -1     # out of the eviction queue
                    qpos[block] = -1
                self.num_evictable_blocks -= len(revived)
                self.num_used_blocks += len(revived)
        ok = self.allocate(new_blocks)
        assert ok
        full = end // bs
        held = known[:hit]
        for i in range(hit, full):                   # blocks cached elsewhere already stay private
            block = known[i]
            if ref[block] < 0:
                held.append(block)
        for i in range(hit, len(held)):
            ref[held[i]] = 1
        self._held[rid] = held
        self._registered[rid] = full
        self.num_queries += 1
        self.query_tokens += num_tokens
        self.hit_tokens += hit * bs
        return True

    def register(self, rid: int, num_computed_tokens: int) -> None:
        """A chunk brings ``rid`` to ``num_computed_tokens`` tokens (its blocks allocated): its newly
        full blocks are cached now, so a request admitted later can hit them (vLLM v1 caches full
        blocks as each chunk is scheduled)."""
        full, done = num_computed_tokens // self.block_size, self._registered[rid]
        if full <= done:
            return
        ref, held = self.ref, self._held[rid]
        for block in self.hashes.id_list_between(rid, done, full):
            if ref[block] < 0:
                ref[block] = 1
                held.append(block)
        self._registered[rid] = full

    def release(self, rid: int, num_computed_tokens: int) -> None:
        """Request ``rid`` finished or was preempted with ``num_computed_tokens`` cached tokens:
        hash its newly filled blocks, drop its references, free its private blocks."""
        bs, ref = self.block_size, self.ref
        held = self._held.pop(rid)
        done = self._registered.pop(rid)
        full = num_computed_tokens // bs
        zero: list[int] = []
        for i in range(len(held) - 1, -1, -1):   # last block first: tails are evicted before shared heads
            block = held[i]
            r = ref[block] - 1
            ref[block] = r
            if r == 0:
                zero.append(block)
        private = -(-num_computed_tokens // bs) - len(held)
        if full > done:
            # Blocks its decode steps filled: cached now, unreferenced at once (unless a copy is cached).
            more = [block for block in self.hashes.id_list_between(rid, done, full) if ref[block] < 0]
            for block in more:
                ref[block] = 0
            private -= len(more)
            more.reverse()
            zero = more + zero
        self.num_used_blocks -= private + len(zero)
        self._push(zero)
        assert self.num_used_blocks >= 0

    def release_many(self, req_ids: list[int], num_computed_tokens: list[int]) -> None:
        for rid, c in zip(req_ids, num_computed_tokens, strict=False):
            self.release(rid, c)

    def release_tail_until_fits(self, req_ids: list[int], num_computed_tokens: list[int], need: list[int]) -> int:
        """Release running rows from the last until the remaining rows' ``need`` blocks are free;
        returns how many rows remain (vLLM's preempt-the-last loop, with shared blocks exact)."""
        keep, total = len(need), sum(need)
        while total > self.num_gpu_blocks - self.num_used_blocks:
            keep -= 1
            self.release(req_ids[keep], num_computed_tokens[keep])
            total -= need[keep]
        return keep

    def stats(self) -> dict[str, int]:
        return {"hit_tokens": self.hit_tokens, "queries": self.query_tokens, "lookups": self.num_queries,
                "evictions": self.evictions}


def prefix_cache_counters(replicas: list) -> dict[str, int] | None:
    """Counters summed over the replicas whose KV cache does prefix caching (None: none does)."""
    caches = [r.scheduler.kv for r in replicas if isinstance(r.scheduler.kv, PrefixCachingKVManager)]
    if not caches:
        return None
    total: dict[str, int] = {}
    for kv in caches:
        for key, value in kv.stats().items():
            total[key] = total.get(key, 0) + value
    return total
