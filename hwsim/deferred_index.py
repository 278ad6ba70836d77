"""The overlap index the deferred dependency pass keeps per memory key, in compiled code.

``hwsim.deferred_deps.resolve`` keeps its accesses in flat int64 tables; this module owns the
part of them that finds, by overlap, the live accesses of a memory key (an on-chip memory of a
core, or an HBM tensor), as ``hwsim.builder._RegionIndex`` does in Python.

Boxes with the key's row pitch are binned by rows and columns (two such boxes overlap only if
they share a bin); anything else (another pitch, a flat interval, a huge box) sits in the key's
``others`` bucket, which every query scans. A bucket holds two lists, one per kind of access:
``BASE`` (what a write made, a first read of unwritten bytes, ``place_hbm``'s whole-tensor
accesses) and ``FRAGMENT`` (what a read records on the part of a wider base it reads). A read's
dependencies come from bases alone, so it never steps over fragments: a tile read by thousands of
overlapping windows (a convolution's taps) has a fragment per window, which the next window's
read would otherwise walk.
"""

from __future__ import annotations

import numba
import numpy as np

#: Regions are indexed in bins of this many bytes per row (partition), and for HBM tensors of this
#: many rows, so finding the earlier accesses that overlap an operand does not scan every one.
#: ``hwsim.builder`` bins with the same constants.
BIN_BYTES = 1024
BIN_ROWS = 128
#: A region that would sit in more bins than this is kept in the index's always-scanned list.
MAX_BINS = 256

#: The kinds of access: a bucket's two lists.
BASE = 0
FRAGMENT = 1

#: ``capacities`` entries (``resolve``'s table sizes): rows for the regions of fragments,
#: accesses, reader nodes, bucket nodes, buckets, bucket ids of regions, fragments by (base,
#: read region), waits, and accesses one query finds.
CAPACITIES = (
    "regions",
    "accesses",
    "readers",
    "nodes",
    "buckets",
    "region_bins",
    "cuts",
    "waits",
    "found",
)
(C_REG, C_ACC, C_RD, C_NODES, C_BUCKETS, C_RBINS, C_CUTS, C_WAITS, C_FOUND) = range(9)

PITCH_UNSET = -1
NONE = -1

# Columns of the tables (int64 arrays, one row per item).
# Regions: the given ones (one per operand value), then the fragments reads make.
KEY, PITCH, R0, R1, C0, C1 = 0, 1, 2, 3, 4, 5
# Accesses: region, writer channel (NONE: none) and value, live, first reader node, the query
# that last met it (so a query lists it once).
REGION, WCH, WVAL, LIVE, RHEAD, STAMP = 0, 1, 2, 3, 4, 5
# Reader nodes: channel, value, next node of the access. Bucket nodes: access, next node.
CH, VAL, NEXT = 0, 1, 2
ACC = 0

#: ``counts`` entries: how many of each table is used, the query stamp, the full status, the
#: fragments made per (base, read region), the waits found, the instruction reached, and the
#: most accesses one query found (``resolve`` returns them, to size a retry's tables).
(N_REG, N_ACC, N_RD, N_NODES, N_BUCKETS, N_RBINS, N_STAMP, N_FULL, N_CUTS, N_WAITS, N_REACHED,
 N_FOUND_MAX) = range(12)  # fmt: skip
N_COUNTS = 12


@numba.njit(cache=True)
def bin_list(pitch, r0, r1, c0, c1):
    """``_RegionIndex.bin_keys`` as (row bin, column bin) rows; no rows: not binned (a binned
    box has at least one bin)."""
    out = np.empty((0, 2), np.int64)
    if r1 <= r0:
        return out
    b0, b1 = c0 // BIN_BYTES, (c1 - 1) // BIN_BYTES + 1
    if b1 <= b0:
        return out
    if pitch == 0:
        if b1 - b0 > MAX_BINS:
            return out
        out = np.empty((b1 - b0, 2), np.int64)
        for i in range(b1 - b0):
            out[i, 0] = 0
            out[i, 1] = b0 + i
        return out
    q0, q1 = r0 // BIN_ROWS, (r1 - 1) // BIN_ROWS + 1
    if (q1 - q0) * (b1 - b0) > MAX_BINS:
        return out
    out = np.empty(((q1 - q0) * (b1 - b0), 2), np.int64)
    i = 0
    for q in range(q0, q1):
        for b in range(b0, b1):
            out[i, 0] = q
            out[i, 1] = b
            i += 1
    return out


@numba.njit(cache=True, inline="always")
def covers(reg, a, b):
    """``Region.covers``: region a covers region b (of one memory key)."""
    return (
        reg[a, PITCH] == reg[b, PITCH]
        and reg[a, R0] <= reg[b, R0]
        and reg[b, R1] <= reg[a, R1]
        and reg[a, C0] <= reg[b, C0]
        and reg[b, C1] <= reg[a, C1]
    )


@numba.njit(cache=True)
def overlaps(reg, a, b):
    """``Region.overlaps`` for two regions of one memory key."""
    if reg[a, PITCH] == reg[b, PITCH]:
        return (
            reg[a, R0] < reg[b, R1]
            and reg[b, R0] < reg[a, R1]
            and reg[a, C0] < reg[b, C1]
            and reg[b, C0] < reg[a, C1]
        )
    a0 = reg[a, R0] * reg[a, PITCH] + reg[a, C0]
    a1 = (reg[a, R1] - 1) * reg[a, PITCH] + reg[a, C1]
    b0 = reg[b, R0] * reg[b, PITCH] + reg[b, C0]
    b1 = (reg[b, R1] - 1) * reg[b, PITCH] + reg[b, C1]
    return a0 < b1 and b0 < a1


@numba.njit(cache=True)
def slot(table, k0, k1, k2):
    """The slot of key (k0, k1, k2) in an open-addressing table (rows: the key, then the
    value; column 0 is NONE in an empty row; keys are >= 0): its row, or the empty row where
    it would go."""
    mask = table.shape[0] - 1
    h = (
        np.uint64(k0) * np.uint64(0x9E3779B97F4A7C15)
        ^ np.uint64(k1) * np.uint64(0xC2B2AE3D27D4EB4F)
        ^ np.uint64(k2) * np.uint64(0x165667B19E3779F9)
    )
    i = np.int64(h >> np.uint64(20)) & mask
    while True:
        if table[i, 0] == NONE or (table[i, 0] == k0 and table[i, 1] == k1 and table[i, 2] == k2):
            return i
        i = (i + 1) & mask


@numba.njit(cache=True, inline="always")
def _next_row(counts, counter, rows, table):
    """The next free row of a table, counted by ``counts[counter]``; NONE if all ``rows`` are
    taken (status set: ``table`` is full)."""
    n = counts[counter]
    if n == rows:
        counts[N_FULL] = 1 + table
        return NONE
    counts[counter] = n + 1
    return n


@numba.njit(cache=True)
def new_bucket(counts, b_head, b_tail, b_next):
    """An empty bucket (both lists), or NONE if the table is full (status set)."""
    b = _next_row(counts, N_BUCKETS, b_head.shape[0], C_BUCKETS)
    if b == NONE:
        return NONE
    for kind in range(2):
        b_head[b, kind] = NONE
        b_tail[b, kind] = NONE
    b_next[b] = NONE
    return b


@numba.njit(cache=True)
def bucket_of(key, row_bin, col_bin, bins, counts, b_head, b_tail, b_next, k_first, k_last):
    """The bucket of a bin, made empty where none is yet (``bins.setdefault``); NONE: full."""
    at = slot(bins, key, row_bin, col_bin)
    if bins[at, 0] != NONE:
        return bins[at, 3]
    b = new_bucket(counts, b_head, b_tail, b_next)
    if b == NONE or 2 * b > bins.shape[0]:  # keep the table at most half full
        counts[N_FULL] = 1 + C_BUCKETS
        return NONE
    bins[at, 0] = key
    bins[at, 1] = row_bin
    bins[at, 2] = col_bin
    bins[at, 3] = b
    if k_last[key] == NONE:
        k_first[key] = b
    else:
        b_next[k_last[key]] = b
    k_last[key] = b
    return b


@numba.njit(cache=True)
def append(bucket, kind, a, counts, nodes, b_head, b_tail):
    """Add access ``a`` at the end of a bucket's ``kind`` list; False: the node table is full."""
    n = _next_row(counts, N_NODES, nodes.shape[0], C_NODES)
    if n == NONE:
        return False
    nodes[n, ACC] = a
    nodes[n, 1] = NONE
    if b_tail[bucket, kind] == NONE:
        b_head[bucket, kind] = n
    else:
        nodes[b_tail[bucket, kind], 1] = n
    b_tail[bucket, kind] = n
    return True


@numba.njit(cache=True)
def new_access(region, wch, wval, counts, acc):
    """A new live access, or NONE if the table is full."""
    a = _next_row(counts, N_ACC, acc.shape[0], C_ACC)
    if a == NONE:
        return NONE
    acc[a, REGION] = region
    acc[a, WCH] = wch
    acc[a, WVAL] = wval
    acc[a, LIVE] = 1
    acc[a, RHEAD] = NONE
    acc[a, STAMP] = 0
    return a


@numba.njit(cache=True)
def set_reader(a, channel, value, counts, acc, rd):
    """``access.readers[channel] = value``; False: the reader table is full."""
    node = acc[a, RHEAD]
    while node != NONE:
        if rd[node, CH] == channel:
            rd[node, VAL] = value
            return True
        node = rd[node, NEXT]
    n = _next_row(counts, N_RD, rd.shape[0], C_RD)
    if n == NONE:
        return False
    rd[n, CH] = channel
    rd[n, VAL] = value
    rd[n, NEXT] = acc[a, RHEAD]
    acc[a, RHEAD] = n
    return True


# ``inline="always"`` on the functions every query runs (per operand, per bucket, per access
# found): a call between compiled functions passes each array with a reference count taken and
# dropped (an atomic operation each), and inlined the whole pass takes half the time (V1: 2.0 ->
# 1.05 us per instruction) for a longer one-time compile.
@numba.njit(cache=True, inline="always")
def scan(bucket, kind, found, n, counts, box, reg, rid, acc, nodes, b_head, b_tail):
    """Append the live accesses of a bucket's ``kind`` list overlapping region ``rid`` (as boxes
    of one pitch if ``box``, else by ``Region.overlaps``) to ``found`` (once each); dead ones are
    unlinked (order kept); what it lists is marked with the query's stamp. Returns the new
    count, or -1 if ``found`` is full (status set)."""
    stamp = counts[N_STAMP]
    r0, r1, c0, c1 = reg[rid, R0], reg[rid, R1], reg[rid, C0], reg[rid, C1]
    previous = NONE
    node = b_head[bucket, kind]
    while node != NONE:
        a = nodes[node, ACC]
        following = nodes[node, 1]
        if acc[a, LIVE] == 0:  # unlink
            if previous == NONE:
                b_head[bucket, kind] = following
            else:
                nodes[previous, 1] = following
            if b_tail[bucket, kind] == node:
                b_tail[bucket, kind] = previous
            node = following
            continue
        if acc[a, STAMP] != stamp:
            o = acc[a, REGION]
            if box:
                hit = reg[o, R0] < r1 and r0 < reg[o, R1] and reg[o, C0] < c1 and c0 < reg[o, C1]
            else:
                hit = overlaps(reg, rid, o)
            if hit:
                if n == found.shape[0]:
                    counts[N_FULL] = 1 + C_FOUND
                    return -1
                acc[a, STAMP] = stamp
                found[n] = a
                n += 1
        previous = node
        node = following
    return n


@numba.njit(cache=True, inline="always")
def overlapping(rid, kinds, counts, found, index):
    """``_RegionIndex.overlapping_in``: the live accesses overlapping a given region, each
    once, of the first ``kinds`` lists of each bucket (1: bases; 2: bases and fragments): its
    buckets, then the others; for a region in no bin, every bucket of its key, then the others.
    Written to ``found``; returns how many (-1: ``found`` is full, status set). ``index``: the
    tables a query reads, as ``resolve`` groups them.

    One loop over the buckets with one ``scan`` in it: the query is inlined wherever it is
    asked, and a copy of the scan per bucket source made the pass slower (instruction cache)."""
    reg, r_binned, r_bin0, r_bin1, rbins, acc, nodes, b_head, b_tail, b_next, k_first, k_others = (
        index
    )
    counts[N_STAMP] += 1  # a new query: accesses met before are met again
    key = reg[rid, KEY]
    binned = r_binned[rid] == 1
    j, end = r_bin0[rid], r_bin1[rid]
    following = NONE if binned else k_first[key]
    n = 0
    while True:
        if binned:
            bucket = rbins[j] if j < end else NONE
            j += 1
        else:
            bucket = following
            if bucket != NONE:
                following = b_next[bucket]
        last = bucket == NONE
        if last:
            bucket = k_others[key]
        for kind in range(kinds):
            box = binned and not last  # boxes of the index's pitch, compared as boxes
            n = scan(bucket, kind, found, n, counts, box, reg, rid, acc, nodes, b_head, b_tail)
            if n < 0:
                return n
        if last:
            break
    if n > counts[N_FOUND_MAX]:
        counts[N_FOUND_MAX] = n
    return n


@numba.njit(cache=True)
def add(a, rid, r_binned, r_bin0, r_bin1, rbins, k_others, reg, counts, nodes, b_head, b_tail):
    """Index base ``a`` in the buckets of given region ``rid``; False: full."""
    if r_binned[rid] == 1:
        for j in range(r_bin0[rid], r_bin1[rid]):
            if not append(rbins[j], BASE, a, counts, nodes, b_head, b_tail):
                return False
        return True
    return append(k_others[reg[rid, KEY]], BASE, a, counts, nodes, b_head, b_tail)
