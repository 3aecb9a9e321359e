"""Block identities. Every full block of a request's token sequence (prompt, then output) has an
integer id that stands for its *whole prefix*, as vLLM's chained block hashes do: two requests
share block ``i`` exactly when their first ``(i + 1) * block_size`` tokens are identical.
:class:`BlockHashes` stores them compactly: an inherited part (a shared system prompt, the
previous turn of a session, a Mooncake trace's ``hash_ids``) as one int64 array plus offsets, and
the rest as a range of fresh ids (``fresh_base[r] + 0, 1, ...``) that nothing else shares. Ids are
dense integers, so the cache state is two lists indexed by id (a request's blocks are walked one by
one: a few dozen list reads in the compiled engine, where numpy's per-call cost would dominate).

The workload draws them (:mod:`simulator.workload.prefix`: shared system prompts, sessions, trace
``hash_ids``); the prefix cache (:mod:`simulator.engine.prefix_cache`) compares them. They live
in the workload package, below the engine, so that the workload never imports the engine.
"""
from __future__ import annotations

import numpy as np

MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per ``hash_ids`` entry in the Mooncake traces (FAST'25 release)."""


class BlockHashes:
    """Ids of the full blocks of each request's prompt + output sequence.

    Block ``i`` of request ``r`` is ``explicit[offsets[r] + i]`` for the first
    ``offsets[r + 1] - offsets[r]`` blocks, then ``fresh_base[r] + (i - that count)``; the request
    has ``num_blocks[r]`` full blocks in all. Ids lie in ``[0, num_ids)``.
    """

    __slots__ = ("explicit", "offsets", "fresh_base", "num_blocks", "num_ids", "first_fresh_id", "block_size",
                 "_offsets", "_fresh_base")

    def __init__(self, explicit: np.ndarray, offsets: np.ndarray, num_blocks: np.ndarray, first_fresh_id: int,
                 block_size: int) -> None:
        self.explicit = np.asarray(explicit, dtype=np.int64)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.num_blocks = np.asarray(num_blocks, dtype=np.int64)
        fresh = self.num_blocks - np.diff(self.offsets)
        assert (fresh >= 0).all(), "inherited blocks exceed a request's blocks"
        self.fresh_base = first_fresh_id + np.cumsum(fresh) - fresh
        self.num_ids = int(first_fresh_id + fresh.sum())
        self.first_fresh_id = first_fresh_id
        self.block_size = block_size
        self._offsets: list[int] = self.offsets.tolist()
        self._fresh_base: list[int] = self.fresh_base.tolist()

    def __len__(self) -> int:
        return len(self.num_blocks)

    def ids(self, r: int, upto: int) -> np.ndarray:
        """The ids of request ``r``'s first ``upto`` full blocks."""
        s, e = int(self.offsets[r]), int(self.offsets[r + 1])
        if s == e:
            return self.fresh_base[r] + np.arange(upto)
        if upto <= e - s:
            return self.explicit[s:s + upto]
        return np.concatenate((self.explicit[s:e], self.fresh_base[r] + np.arange(upto - (e - s))))

    def ids_between(self, r: int, lo: int, hi: int) -> np.ndarray:
        """The ids of request ``r``'s blocks ``lo .. hi - 1``."""
        s, e = int(self.offsets[r]), int(self.offsets[r + 1])
        n = e - s
        if lo >= n:
            return self.fresh_base[r] + np.arange(lo - n, hi - n)
        return self.ids(r, hi)[lo:]

    def id_list(self, r: int, upto: int) -> list[int]:
        """:meth:`ids` as a list."""
        s, e = self._offsets[r], self._offsets[r + 1]
        n = e - s
        if upto <= n:
            return self.explicit[s:s + upto].tolist() if upto else []
        base = self._fresh_base[r]
        fresh = list(range(base, base + upto - n))
        return self.explicit[s:e].tolist() + fresh if n else fresh

    def id_list_between(self, r: int, lo: int, hi: int) -> list[int]:
        """:meth:`ids_between` as a list."""
        n = self._offsets[r + 1] - self._offsets[r]
        if lo >= n:
            base = self._fresh_base[r] - n
            return list(range(base + lo, base + hi))
        return self.id_list(r, hi)[lo:]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.explicit, self.offsets, self.fresh_base, self.num_blocks))


def _ragged(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenation of ``starts[i] + arange(lengths[i])`` and the offsets of each piece."""
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    total = int(offsets[-1])
    within = np.arange(total, dtype=np.int64) - np.repeat(offsets[:-1], lengths)
    return np.repeat(starts.astype(np.int64), lengths) + within, offsets


def prefix_block_hashes(num_blocks: np.ndarray, prefix_index: np.ndarray, prefix_tokens: np.ndarray,
                        num_prefixes: int, max_prefix_tokens: int, block_size: int) -> BlockHashes:
    """Requests that start with system prompt ``prefix_index[r]`` (-1: none) of
    ``prefix_tokens[r]`` tokens share its full blocks; everything else is fresh."""
    per_prefix = max_prefix_tokens // block_size
    lengths = np.where(prefix_index >= 0, prefix_tokens // block_size, 0).astype(np.int64)
    explicit, offsets = _ragged(np.maximum(prefix_index, 0) * per_prefix, lengths)
    return BlockHashes(explicit, offsets, num_blocks, num_prefixes * per_prefix, block_size)


def session_block_hashes(num_blocks: np.ndarray, parent: np.ndarray, base: BlockHashes) -> BlockHashes:
    """Turn ``r`` with ``parent[r] >= 0`` starts with every full block of its parent's prompt +
    output (its previous turn); first turns keep their inherited blocks from ``base`` (prefixes).

    ``parent[r] < r`` (turns are in arrival order); ids are assigned in request order.
    """
    n = len(num_blocks)
    pieces: list[np.ndarray] = []
    full: list[np.ndarray | None] = [None] * n
    needed = np.zeros(n, dtype=bool)
    needed[parent[parent >= 0]] = True
    next_fresh = base.first_fresh_id
    for r in range(n):
        p = int(parent[r])
        if p >= 0:
            inherited = full[p]
            assert inherited is not None
        else:
            inherited = base.explicit[base.offsets[r]:base.offsets[r + 1]]
        pieces.append(inherited)
        if needed[r]:
            fresh = int(num_blocks[r]) - len(inherited)
            full[r] = np.concatenate((inherited, next_fresh + np.arange(fresh, dtype=np.int64)))
        next_fresh += int(num_blocks[r]) - len(inherited)
    lengths = np.array([len(x) for x in pieces], dtype=np.int64)
    explicit = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    return BlockHashes(explicit, np.concatenate(([0], np.cumsum(lengths))), num_blocks, base.first_fresh_id,
                       base.block_size)


def mooncake_block_hashes(hash_ids: list[list[int]], num_prompt_tokens: np.ndarray, num_blocks: np.ndarray,
                          block_size: int) -> BlockHashes:
    """Map a Mooncake trace's ``hash_ids`` (one id per 512 prompt tokens) onto ``block_size``.

    Hash ids are chained (an entry stands for the request's whole prefix up to it, as in vLLM), so
    two requests share hash block ``j`` only when their ids agree on blocks ``0..j``. A block of
    ``block_size`` tokens ending at token ``e`` lies within the hash block ``h = (e - 1) // 512``
    (or, when 512 is not a multiple of ``block_size``, straddles ``h - 1`` and ``h``); it is shared
    exactly when the chains agree through ``h``. Sharing is therefore resolved at the trace's
    512-token granularity (the trace says nothing finer); blocks past the ``hash_ids`` coverage
    or past the prompt are fresh.
    """
    chain: dict[tuple[int, int], int] = {}
    keys: list[np.ndarray] = []
    for r, ids in enumerate(hash_ids):
        length = int(num_prompt_tokens[r])
        covered = min(length, MOONCAKE_BLOCK_TOKENS * len(ids)) // block_size
        node, nodes = -1, []
        for j in ids[: -(-covered * block_size // MOONCAKE_BLOCK_TOKENS)]:
            node = chain.setdefault((node, int(j)), len(chain))
            nodes.append(node)
        ends = (np.arange(covered, dtype=np.int64) + 1) * block_size
        h = (ends - 1) // MOONCAKE_BLOCK_TOKENS
        node_arr = np.asarray(nodes, dtype=np.int64)
        keys.append(node_arr[h] * MOONCAKE_BLOCK_TOKENS + (ends - 1 - h * MOONCAKE_BLOCK_TOKENS) if covered
                    else np.zeros(0, dtype=np.int64))
    lengths = np.array([len(k) for k in keys], dtype=np.int64)
    flat = np.concatenate(keys) if keys else np.zeros(0, dtype=np.int64)
    uniq, dense = np.unique(flat, return_inverse=True)
    return BlockHashes(dense.astype(np.int64), np.concatenate(([0], np.cumsum(lengths))), num_blocks,
                       len(uniq), block_size)


def fresh_block_hashes(num_blocks: np.ndarray, block_size: int) -> BlockHashes:
    """No request shares anything (but a preempted request can find its own blocks again)."""
    return BlockHashes(np.zeros(0, dtype=np.int64), np.zeros(len(num_blocks) + 1, dtype=np.int64), num_blocks,
                       0, block_size)
