"""The builder's dependency rules, run once per program in compiled code.

``ProgramBuilder.emit`` works out an instruction's semaphore waits as it is emitted, in Python
(``hwsim.builder``: RAW always; WAR and WAW across channels; reads recorded on the bytes they
touch; a DMA queue's transfers complete in emission order). That is about 40 µs per instruction,
most of a kernel's build. A deferred builder (``ProgramBuilder(deferred=True)``, what kernels
use) only records each instruction's channel and operand regions, and ``resolve`` applies the
same rules to the whole record in one Numba pass when the program is built.

The Python builder is the specification: ``resolve`` mirrors it step for step, including the
order accesses are found in (a read of part of a wider write makes a part of its own, with the
readers of the first access found), and ``tests/unit/test_deferred_deps.py`` checks that both
give the same waits on every pinned program and on random access streams. A change to the rules
is made in both.

Inputs are flat arrays: one row per operand region, per instruction template (an engine, a
channel and operand occurrences, shared by the instructions with one ``static_key`` and the same
untracked inputs), and per instruction (its template, or -1 - k for the k-th ``place_hbm`` step).
The output is each instruction's new waits as (channel, value) pairs in channel-name order.
"""

from __future__ import annotations

import numba
import numpy as np

#: Regions are indexed in bins of this many bytes per row (partition), and for HBM tensors of this
#: many rows, so finding the earlier accesses that overlap an operand does not scan every one.
#: ``hwsim.builder`` bins with the same constants: the order accesses are found in depends on them.
BIN_BYTES = 1024
BIN_ROWS = 128
#: A region that would sit in more bins than this is kept in the index's always-scanned list.
MAX_BINS = 256

#: Operand flags: written (else read); an HBM input tensor no instruction had written when this
#: one was emitted (untracked: its reads are counted per channel, not as accesses).
WRITE = 1
INPUT = 2

#: ``resolve``'s status: done, or 1 + the ``capacities`` entry of a table that was full (the
#: caller retries with that one larger).
DONE = 0
#: ``capacities`` entries: rows for the regions of parts, accesses, reader nodes, bucket nodes,
#: buckets, bucket ids of regions, parts made (``cuts``), waits, and accesses one query finds.
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

_PITCH_UNSET = -1
_NONE = -1

# Columns of the tables (int64 arrays, one row per item).
# Regions: the given ones (one per operand value), then the parts reads make.
_KEY, _PITCH, _R0, _R1, _C0, _C1 = 0, 1, 2, 3, 4, 5
# Accesses: region, writer channel (_NONE: none) and value, live, first reader node, the query
# that last met it (so a query lists it once).
_REGION, _WCH, _WVAL, _LIVE, _RHEAD, _STAMP = 0, 1, 2, 3, 4, 5
# Reader nodes: channel, value, next node of the access. Bucket nodes: access, next node.
_CH, _VAL, _NEXT = 0, 1, 2
_ACC = 0


@numba.njit(cache=True)
def _bin_list(pitch, r0, r1, c0, c1):
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


@numba.njit(cache=True)
def _covers(reg, a, b):
    """``Region.covers``: region a covers region b (of one memory key)."""
    return (
        reg[a, _PITCH] == reg[b, _PITCH]
        and reg[a, _R0] <= reg[b, _R0]
        and reg[b, _R1] <= reg[a, _R1]
        and reg[a, _C0] <= reg[b, _C0]
        and reg[b, _C1] <= reg[a, _C1]
    )


@numba.njit(cache=True)
def _overlaps(reg, a, b):
    """``Region.overlaps`` for two regions of one memory key."""
    if reg[a, _PITCH] == reg[b, _PITCH]:
        return (
            reg[a, _R0] < reg[b, _R1]
            and reg[b, _R0] < reg[a, _R1]
            and reg[a, _C0] < reg[b, _C1]
            and reg[b, _C0] < reg[a, _C1]
        )
    a0 = reg[a, _R0] * reg[a, _PITCH] + reg[a, _C0]
    a1 = (reg[a, _R1] - 1) * reg[a, _PITCH] + reg[a, _C1]
    b0 = reg[b, _R0] * reg[b, _PITCH] + reg[b, _C0]
    b1 = (reg[b, _R1] - 1) * reg[b, _PITCH] + reg[b, _C1]
    return a0 < b1 and b0 < a1


@numba.njit(cache=True)
def _slot(table, k0, k1, k2):
    """The slot of key (k0, k1, k2) in an open-addressing table (rows: the key, then the
    value; column 0 is _NONE in an empty row; keys are >= 0): its row, or the empty row where
    it would go."""
    mask = table.shape[0] - 1
    h = (
        np.uint64(k0) * np.uint64(0x9E3779B97F4A7C15)
        ^ np.uint64(k1) * np.uint64(0xC2B2AE3D27D4EB4F)
        ^ np.uint64(k2) * np.uint64(0x165667B19E3779F9)
    )
    i = np.int64(h >> np.uint64(20)) & mask
    while True:
        if table[i, 0] == _NONE or (table[i, 0] == k0 and table[i, 1] == k1 and table[i, 2] == k2):
            return i
        i = (i + 1) & mask


class _Tables:
    """Documentation only (Numba passes the arrays one by one): the state ``resolve`` keeps.

    reg[n, 6]: regions. acc[n, 6]: accesses. rd[n, 3]: reader nodes. nodes[n, 2]: bucket
    nodes (a bucket is a linked list of accesses, in the order added). b_head/b_tail[n]: a
    bucket's first and last node; b_next[n]: the key's next bucket in the order made (the order
    of ``bins.values()``). k_pitch/k_first/k_last/k_others[n]: per memory key its index's pitch,
    first and last bucket, and the bucket of its accesses in no bin. r_binned/r_bin0/r_bin1
    per given region: not seen yet (-1), in no bin (0) or binned (1), and its buckets as a range
    of ``rbins``. counts: how many of each table is used.
    """


#: ``counts`` entries.
_N_REG, _N_ACC, _N_RD, _N_NODES, _N_BUCKETS, _N_RBINS, _N_STAMP, _N_FULL = range(8)


@numba.njit(cache=True)
def _new_bucket(counts, b_head, b_tail, b_next):
    b = counts[_N_BUCKETS]
    if b == b_head.shape[0]:
        counts[_N_FULL] = 1 + C_BUCKETS
        return _NONE
    counts[_N_BUCKETS] = b + 1
    b_head[b] = _NONE
    b_tail[b] = _NONE
    b_next[b] = _NONE
    return b


@numba.njit(cache=True)
def _bucket(key, row_bin, col_bin, bins, counts, b_head, b_tail, b_next, k_first, k_last):
    """The bucket of a bin, made empty where none is yet (``bins.setdefault``); _NONE: full."""
    slot = _slot(bins, key, row_bin, col_bin)
    if bins[slot, 0] != _NONE:
        return bins[slot, 3]
    b = _new_bucket(counts, b_head, b_tail, b_next)
    if b == _NONE or 2 * b > bins.shape[0]:  # keep the table at most half full
        counts[_N_FULL] = 1 + C_BUCKETS
        return _NONE
    bins[slot, 0] = key
    bins[slot, 1] = row_bin
    bins[slot, 2] = col_bin
    bins[slot, 3] = b
    if k_last[key] == _NONE:
        k_first[key] = b
    else:
        b_next[k_last[key]] = b
    k_last[key] = b
    return b


@numba.njit(cache=True)
def _append(bucket, a, counts, nodes, b_head, b_tail):
    """Add access ``a`` at the end of a bucket; False: the node table is full."""
    n = counts[_N_NODES]
    if n == nodes.shape[0]:
        counts[_N_FULL] = 1 + C_NODES
        return False
    counts[_N_NODES] = n + 1
    nodes[n, _ACC] = a
    nodes[n, 1] = _NONE
    if b_tail[bucket] == _NONE:
        b_head[bucket] = n
    else:
        nodes[b_tail[bucket], 1] = n
    b_tail[bucket] = n
    return True


@numba.njit(cache=True)
def _new_access(region, wch, wval, counts, acc):
    """A new live access, or _NONE if the table is full."""
    a = counts[_N_ACC]
    if a == acc.shape[0]:
        counts[_N_FULL] = 1 + C_ACC
        return _NONE
    counts[_N_ACC] = a + 1
    acc[a, _REGION] = region
    acc[a, _WCH] = wch
    acc[a, _WVAL] = wval
    acc[a, _LIVE] = 1
    acc[a, _RHEAD] = _NONE
    acc[a, _STAMP] = 0
    return a


@numba.njit(cache=True)
def _set_reader(a, channel, value, counts, acc, rd):
    """``access.readers[channel] = value``; False: the reader table is full."""
    node = acc[a, _RHEAD]
    while node != _NONE:
        if rd[node, _CH] == channel:
            rd[node, _VAL] = value
            return True
        node = rd[node, _NEXT]
    n = counts[_N_RD]
    if n == rd.shape[0]:
        counts[_N_FULL] = 1 + C_RD
        return False
    counts[_N_RD] = n + 1
    rd[n, _CH] = channel
    rd[n, _VAL] = value
    rd[n, _NEXT] = acc[a, _RHEAD]
    acc[a, _RHEAD] = n
    return True


# ``inline="always"`` on the three functions every query runs (per operand, per bucket): a call
# between compiled functions passes each array with a reference count taken and dropped, and
# inlined the whole pass takes half the time (V1: 2.0 -> 1.05 us per instruction) for a longer
# one-time compile (16 -> 22 s here).
@numba.njit(cache=True, inline="always")
def _scan(bucket, found, n, counts, box, reg, rid, acc, nodes, b_head, b_tail):
    """Append the live accesses of a bucket overlapping region ``rid`` (as boxes of one pitch
    if ``box``, else by ``Region.overlaps``) to ``found`` (once each); dead ones are unlinked
    (order kept); what it lists is marked with the query's stamp. Returns the new count, or
    -1 if ``found`` is full (status set)."""
    stamp = counts[_N_STAMP]
    r0, r1, c0, c1 = reg[rid, _R0], reg[rid, _R1], reg[rid, _C0], reg[rid, _C1]
    previous = _NONE
    node = b_head[bucket]
    while node != _NONE:
        a = nodes[node, _ACC]
        following = nodes[node, 1]
        if acc[a, _LIVE] == 0:  # unlink
            if previous == _NONE:
                b_head[bucket] = following
            else:
                nodes[previous, 1] = following
            if b_tail[bucket] == node:
                b_tail[bucket] = previous
            node = following
            continue
        if acc[a, _STAMP] != stamp:
            o = acc[a, _REGION]
            if box:
                hit = (
                    reg[o, _R0] < r1 and r0 < reg[o, _R1] and reg[o, _C0] < c1 and c0 < reg[o, _C1]
                )
            else:
                hit = _overlaps(reg, rid, o)
            if hit:
                if n == found.shape[0]:
                    counts[_N_FULL] = 1 + C_FOUND
                    return -1
                acc[a, _STAMP] = stamp
                found[n] = a
                n += 1
        previous = node
        node = following
    return n


@numba.njit(cache=True, inline="always")
def _overlapping(rid, counts, found, index):
    """``_RegionIndex.overlapping_in``: the live accesses overlapping a given region, each
    once, in the order the Python builder finds them: its buckets in bin order, then the
    others; for a region in no bin, every bucket of its key in the order made, then the
    others. Written to ``found``; returns how many (-1: ``found`` is full, status set).
    ``index``: the tables a query reads, as ``resolve`` groups them."""
    reg, r_binned, r_bin0, r_bin1, rbins, acc, nodes, b_head, b_tail, b_next, k_first, k_others = (
        index
    )
    counts[_N_STAMP] += 1  # a new query: accesses met before are met again
    key = reg[rid, _KEY]
    n = 0
    if r_binned[rid] == 1:
        for j in range(r_bin0[rid], r_bin1[rid]):
            n = _scan(rbins[j], found, n, counts, True, reg, rid, acc, nodes, b_head, b_tail)
            if n < 0:
                return n
    else:
        bucket = k_first[key]
        while bucket != _NONE:
            n = _scan(bucket, found, n, counts, False, reg, rid, acc, nodes, b_head, b_tail)
            if n < 0:
                return n
            bucket = b_next[bucket]
    return _scan(k_others[key], found, n, counts, False, reg, rid, acc, nodes, b_head, b_tail)


@numba.njit(cache=True, inline="always")
def _need(needs, touched, n_touched, channel, value):
    """The instruction needs completion ``value`` of ``channel`` (the most it needs counts);
    ``touched`` lists the channels it needs something of. Returns their new count."""
    if needs[channel] < value:
        if needs[channel] == 0:
            touched[n_touched] = channel
            n_touched += 1
        needs[channel] = value
    return n_touched


@numba.njit(cache=True)
def _add(a, rid, r_binned, r_bin0, r_bin1, rbins, k_others, reg, counts, nodes, b_head, b_tail):
    """``index.add_to(access, the buckets of given region rid)``; False: full."""
    if r_binned[rid] == 1:
        for j in range(r_bin0[rid], r_bin1[rid]):
            if not _append(rbins[j], a, counts, nodes, b_head, b_tail):
                return False
        return True
    return _append(k_others[reg[rid, _KEY]], a, counts, nodes, b_head, b_tail)


@numba.njit(cache=True)
def resolve(
    given_regions,
    n_keys,
    instr_template,
    t_engine,
    t_channel,
    t_is_dma,
    t_op_end,
    op_region,
    op_flags,
    place_whole,
    place_key,
    place_earlier_end,
    place_earlier,
    n_engines,
    channel_rank,
    capacities,
):
    """The new waits of every instruction: (status, wait_end per instruction, channels,
    values). ``capacities`` sizes the tables (``CAPACITIES``); a status other than DONE names
    one that was too small: retry with it larger."""
    n_channels = channel_rank.shape[0]
    n_given = given_regions.shape[0]
    empty = np.zeros(0, np.int64)
    # Tables (``_Tables``).
    capacity = capacities[C_ACC]
    reg = np.empty((n_given + capacities[C_REG], 6), np.int64)
    reg[:n_given] = given_regions
    acc = np.empty((capacity, 6), np.int64)
    rd = np.empty((capacities[C_RD], 3), np.int64)
    nodes = np.empty((capacities[C_NODES], 2), np.int64)
    n_bucket_cap = capacities[C_BUCKETS] + n_keys
    bucket_table_rows = 16
    while bucket_table_rows < 2 * n_bucket_cap:
        bucket_table_rows *= 2
    cut_table_rows = 16
    while cut_table_rows < 2 * capacities[C_CUTS]:
        cut_table_rows *= 2
    b_head = np.empty(n_bucket_cap, np.int64)
    b_tail = np.empty(n_bucket_cap, np.int64)
    b_next = np.empty(n_bucket_cap, np.int64)
    rbins = np.empty(capacities[C_RBINS], np.int64)
    counts = np.zeros(8, np.int64)
    counts[_N_REG] = n_given
    k_pitch = np.full(n_keys, _PITCH_UNSET, np.int64)
    k_first = np.full(n_keys, _NONE, np.int64)
    k_last = np.full(n_keys, _NONE, np.int64)
    k_others = np.empty(n_keys, np.int64)
    for key in range(n_keys):
        k_others[key] = _new_bucket(counts, b_head, b_tail, b_next)
    r_binned = np.full(n_given, -1, np.int64)
    r_bin0 = np.zeros(n_given, np.int64)
    r_bin1 = np.zeros(n_given, np.int64)
    # What a query reads (``_overlapping``), in one argument.
    index = (
        reg,
        r_binned,
        r_bin0,
        r_bin1,
        rbins,
        acc,
        nodes,
        b_head,
        b_tail,
        b_next,
        k_first,
        k_others,
    )
    # Hash tables (``_slot``): (key, row bin, column bin) -> bucket; (access, read region, 0)
    # -> the part that read made of it (``_Access.cuts``).
    bins = np.full((bucket_table_rows, 4), _NONE, np.int64)
    cuts = np.full((cut_table_rows, 4), _NONE, np.int64)
    n_cuts = 0
    # ``_CoreTracker``'s counters.
    counts_ch = np.zeros(n_channels, np.int64)
    satisfied = np.zeros((n_engines, n_channels), np.int64)
    queue_engine = np.full(n_channels, _NONE, np.int64)
    input_readers = np.zeros((n_keys, n_channels), np.int64)
    needs = np.zeros(n_channels, np.int64)
    touched = np.empty(n_channels, np.int64)
    found = np.empty(capacities[C_FOUND], np.int64)
    parts = np.empty(
        (capacities[C_FOUND], 6), np.int64
    )  # (row0, row1, col0, col1, writer channel, value)

    n_instr = instr_template.shape[0]
    wait_end = np.zeros(n_instr, np.int64)
    wait_ch = np.empty(capacities[C_WAITS], np.int64)
    wait_val = np.empty(capacities[C_WAITS], np.int64)
    n_waits = 0

    for i in range(n_instr):
        t = instr_template[i]
        if t < 0:  # ``place_hbm``
            if not _place(
                -t - 1, place_whole, place_key, place_earlier_end, place_earlier, reg, acc, rd,
                nodes, b_head, b_tail, b_next, k_pitch, k_first, k_others, counts, n_channels,
            ):  # fmt: skip
                return counts[_N_FULL], wait_end, empty, empty
            wait_end[i] = n_waits
            continue
        op0 = t_op_end[t - 1] if t > 0 else 0
        op1 = t_op_end[t]
        engine = t_engine[t]
        channel = t_channel[t]
        seq = counts_ch[channel] + 1
        n_touched = 0
        # ---- dependency pass: the completions it needs (reads come first) ------------------
        for o in range(op0, op1):
            flags = op_flags[o]
            is_write = (flags & WRITE) != 0
            rid = op_region[o]
            key = reg[rid, _KEY]
            if r_binned[rid] < 0:  # ``_CoreTracker.operand``: its index and bins, once
                if k_pitch[key] == _PITCH_UNSET:
                    k_pitch[key] = reg[rid, _PITCH]
                keys = _bin_list(
                    k_pitch[key], reg[rid, _R0], reg[rid, _R1], reg[rid, _C0], reg[rid, _C1]
                )
                r_binned[rid] = 0
                if reg[rid, _PITCH] == k_pitch[key] and keys.shape[0] > 0:
                    if counts[_N_RBINS] + keys.shape[0] > rbins.shape[0]:
                        counts[_N_FULL] = 1 + C_RBINS
                        return counts[_N_FULL], wait_end, empty, empty
                    r_bin0[rid] = counts[_N_RBINS]
                    for k in range(keys.shape[0]):
                        b = _bucket(
                            key, keys[k, 0], keys[k, 1], bins, counts, b_head, b_tail, b_next,
                            k_first, k_last,
                        )  # fmt: skip
                        if b == _NONE:
                            return counts[_N_FULL], wait_end, empty, empty
                        rbins[counts[_N_RBINS]] = b
                        counts[_N_RBINS] += 1
                    r_bin1[rid] = counts[_N_RBINS]
                    r_binned[rid] = 1
            if (flags & INPUT) != 0:
                if is_write:  # an input overwritten: wait for every earlier reader of it
                    for c in range(n_channels):
                        if c != channel:
                            n_touched = _need(needs, touched, n_touched, c, input_readers[key, c])
                continue  # reads of an untracked input wait for nothing
            n_found = _overlapping(rid, counts, found, index)
            if n_found < 0:
                return counts[_N_FULL], wait_end, empty, empty
            for j in range(n_found):
                a = found[j]
                wch = acc[a, _WCH]
                if wch != _NONE and (not is_write or wch != channel):
                    # RAW (also on the channel); WAW across channels
                    n_touched = _need(needs, touched, n_touched, wch, acc[a, _WVAL])
                if is_write:
                    node = acc[a, _RHEAD]
                    while node != _NONE:
                        if rd[node, _CH] != channel:  # WAR across channels
                            n_touched = _need(
                                needs, touched, n_touched, rd[node, _CH], rd[node, _VAL]
                            )
                        node = rd[node, _NEXT]
        if t_is_dma[t]:
            # Completion k of a queue is its k-th transfer: a trigger from another engine than
            # the previous one waits for the previous transfer.
            previous = queue_engine[channel]
            if previous != _NONE and previous != engine:
                n_touched = _need(needs, touched, n_touched, channel, seq - 1)
            queue_engine[channel] = engine
        # ``_new_waits``: in channel-name order, those the stream has not waited for yet.
        if n_touched:
            if n_waits + n_touched > wait_ch.shape[0]:
                counts[_N_FULL] = 1 + C_WAITS
                return counts[_N_FULL], wait_end, empty, empty
            for j in range(1, n_touched):  # insertion sort by name: a few channels
                c = touched[j]
                k = j - 1
                while k >= 0 and channel_rank[touched[k]] > channel_rank[c]:
                    touched[k + 1] = touched[k]
                    k -= 1
                touched[k + 1] = c
            for j in range(n_touched):
                c = touched[j]
                value = needs[c]
                needs[c] = 0
                if satisfied[engine, c] >= value:
                    continue
                satisfied[engine, c] = value
                wait_ch[n_waits] = c
                wait_val[n_waits] = value
                n_waits += 1
        wait_end[i] = n_waits
        counts_ch[channel] = seq
        # ---- record pass: its reads ---------------------------------------------------------
        for o in range(op0, op1):
            flags = op_flags[o]
            if (flags & WRITE) != 0:
                continue
            rid = op_region[o]
            key = reg[rid, _KEY]
            if (flags & INPUT) != 0:
                input_readers[key, channel] = seq
                continue
            n_found = _overlapping(rid, counts, found, index)
            if n_found < 0:
                return counts[_N_FULL], wait_end, empty, empty
            if n_found == 0:
                a = _new_access(rid, _NONE, 0, counts, acc)
                if a == _NONE or not _set_reader(a, channel, seq, counts, acc, rd):
                    return counts[_N_FULL], wait_end, empty, empty
                if not _add(
                    a, rid, r_binned, r_bin0, r_bin1, rbins, k_others, reg, counts, nodes,
                    b_head, b_tail,
                ):  # fmt: skip
                    return counts[_N_FULL], wait_end, empty, empty
                continue
            # A read is recorded on the bytes it reads: a wider access gets a part of its own
            # (its writer and readers, plus this reader), made once per read region.
            n_parts = -1  # not listed yet
            for j in range(n_found):
                a = found[j]
                other = acc[a, _REGION]
                if _covers(reg, rid, other):
                    if not _set_reader(a, channel, seq, counts, acc, rd):
                        return counts[_N_FULL], wait_end, empty, empty
                    continue
                cut = _slot(cuts, a, rid, 0)
                if cuts[cut, 0] != _NONE and acc[cuts[cut, 3], _LIVE] == 1:
                    continue
                if reg[other, _PITCH] != reg[rid, _PITCH]:  # no box in common: conservative
                    if not _set_reader(a, channel, seq, counts, acc, rd):
                        return counts[_N_FULL], wait_end, empty, empty
                    continue
                p_r0 = max(reg[other, _R0], reg[rid, _R0])
                p_r1 = min(reg[other, _R1], reg[rid, _R1])
                p_c0 = max(reg[other, _C0], reg[rid, _C0])
                p_c1 = min(reg[other, _C1], reg[rid, _C1])
                wch = acc[a, _WCH]
                wval = acc[a, _WVAL] if wch != _NONE else 0
                if n_parts < 0:  # the parts already there: the accesses the read covers
                    n_parts = 0
                    for jb in range(n_found):
                        b = found[jb]
                        rb = acc[b, _REGION]
                        if _covers(reg, rid, rb):
                            parts[n_parts, 0] = reg[rb, _R0]
                            parts[n_parts, 1] = reg[rb, _R1]
                            parts[n_parts, 2] = reg[rb, _C0]
                            parts[n_parts, 3] = reg[rb, _C1]
                            parts[n_parts, 4] = acc[b, _WCH]
                            parts[n_parts, 5] = acc[b, _WVAL] if acc[b, _WCH] != _NONE else 0
                            n_parts += 1
                known = False
                for q in range(n_parts):  # same key and pitch as the read: by box and writer
                    if (
                        parts[q, 0] == p_r0
                        and parts[q, 1] == p_r1
                        and parts[q, 2] == p_c0
                        and parts[q, 3] == p_c1
                        and parts[q, 4] == wch
                        and parts[q, 5] == wval
                    ):
                        known = True
                        break
                if known:
                    continue
                parts[n_parts, 0] = p_r0
                parts[n_parts, 1] = p_r1
                parts[n_parts, 2] = p_c0
                parts[n_parts, 3] = p_c1
                parts[n_parts, 4] = wch
                parts[n_parts, 5] = wval
                n_parts += 1
                part = counts[_N_REG]
                if part == reg.shape[0]:
                    counts[_N_FULL] = 1 + C_REG
                    return counts[_N_FULL], wait_end, empty, empty
                counts[_N_REG] = part + 1
                reg[part, _KEY] = key
                reg[part, _PITCH] = reg[rid, _PITCH]
                reg[part, _R0] = p_r0
                reg[part, _R1] = p_r1
                reg[part, _C0] = p_c0
                reg[part, _C1] = p_c1
                made = _new_access(part, wch, wval, counts, acc)
                if made == _NONE:
                    return counts[_N_FULL], wait_end, empty, empty
                node = acc[a, _RHEAD]
                while node != _NONE:
                    if not _set_reader(made, rd[node, _CH], rd[node, _VAL], counts, acc, rd):
                        return counts[_N_FULL], wait_end, empty, empty
                    node = rd[node, _NEXT]
                if not _set_reader(made, channel, seq, counts, acc, rd):
                    return counts[_N_FULL], wait_end, empty, empty
                keys = _bin_list(k_pitch[key], p_r0, p_r1, p_c0, p_c1)
                if reg[part, _PITCH] != k_pitch[key] or keys.shape[0] == 0:
                    if not _append(k_others[key], made, counts, nodes, b_head, b_tail):
                        return counts[_N_FULL], wait_end, empty, empty
                else:
                    for k in range(keys.shape[0]):
                        b = _bucket(
                            key, keys[k, 0], keys[k, 1], bins, counts, b_head, b_tail, b_next,
                            k_first, k_last,
                        )  # fmt: skip
                        if b == _NONE or not _append(b, made, counts, nodes, b_head, b_tail):
                            return counts[_N_FULL], wait_end, empty, empty
                if cuts[cut, 0] == _NONE:
                    if 2 * (n_cuts + 1) > cuts.shape[0]:
                        counts[_N_FULL] = 1 + C_CUTS
                        return counts[_N_FULL], wait_end, empty, empty
                    n_cuts += 1
                cuts[cut, 0] = a
                cuts[cut, 1] = rid
                cuts[cut, 2] = 0
                cuts[cut, 3] = made
        # ---- record pass: its writes (what they cover is dead) ------------------------------
        for o in range(op0, op1):
            if (op_flags[o] & WRITE) == 0:
                continue
            rid = op_region[o]
            n_found = _overlapping(rid, counts, found, index)
            if n_found < 0:
                return counts[_N_FULL], wait_end, empty, empty
            for j in range(n_found):
                a = found[j]
                if _covers(reg, rid, acc[a, _REGION]):
                    acc[a, _LIVE] = 0
            a = _new_access(rid, channel, seq, counts, acc)
            if a == _NONE or not _add(
                a, rid, r_binned, r_bin0, r_bin1, rbins, k_others, reg, counts, nodes, b_head,
                b_tail,
            ):  # fmt: skip
                return counts[_N_FULL], wait_end, empty, empty
    return DONE, wait_end, wait_ch[:n_waits].copy(), wait_val[:n_waits].copy()


@numba.njit(cache=True)
def _place(
    p, place_whole, place_key, place_earlier_end, place_earlier, reg, acc, rd, nodes, b_head,
    b_tail, b_next, k_pitch, k_first, k_others, counts, n_channels,
):  # fmt: skip
    """``ProgramBuilder.place_hbm``: the placed tensor's first accesses wait for every access
    so far to the tensors it replaces (whole-tensor accesses, in no bin). False: full."""
    writers = np.zeros(n_channels, np.int64)
    readers = np.zeros(n_channels, np.int64)
    writer_order = np.empty(n_channels, np.int64)  # writer channels in the order met
    n_writers = 0
    any_access = False
    e0 = place_earlier_end[p - 1] if p > 0 else 0
    for e in range(e0, place_earlier_end[p]):
        key = place_earlier[e]
        if k_pitch[key] == _PITCH_UNSET:  # no index: nothing touched it
            continue
        # ``live_accesses``: each once, in the order met (buckets in the order made, others).
        bucket = k_first[key]
        counts[_N_STAMP] += 1
        stamp = counts[_N_STAMP]
        while True:
            if bucket == _NONE:
                bucket = k_others[key]
                last = True
            else:
                last = False
            node = b_head[bucket]
            while node != _NONE:
                a = nodes[node, _ACC]
                node = nodes[node, 1]
                if acc[a, _LIVE] == 0 or acc[a, _STAMP] == stamp:
                    continue
                acc[a, _STAMP] = stamp
                c = acc[a, _WCH]
                if c != _NONE:
                    any_access = True
                    if writers[c] == 0:
                        writer_order[n_writers] = c
                        n_writers += 1
                    writers[c] = max(writers[c], acc[a, _WVAL])
                r = acc[a, _RHEAD]
                while r != _NONE:
                    any_access = True
                    readers[rd[r, _CH]] = max(readers[rd[r, _CH]], rd[r, _VAL])
                    r = rd[r, _NEXT]
            if last:
                break
            bucket = b_next[bucket]
    if not any_access:
        return True
    whole = place_whole[p]
    key = place_key[p]
    if k_pitch[key] == _PITCH_UNSET:  # ``tracker.index(whole)``: made with its pitch
        k_pitch[key] = reg[whole, _PITCH]
    first = _NONE
    for w in range(max(n_writers, 1)):
        if n_writers:
            made = _new_access(whole, writer_order[w], writers[writer_order[w]], counts, acc)
        else:
            made = _new_access(whole, _NONE, 0, counts, acc)
        if made == _NONE or not _append(k_others[key], made, counts, nodes, b_head, b_tail):
            return False
        if first == _NONE:
            first = made
    for c in range(n_channels):
        if readers[c] > 0 and not _set_reader(first, c, readers[c], counts, acc, rd):
            return False
    return True
