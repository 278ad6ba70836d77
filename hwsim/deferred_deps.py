"""The builder's dependency rules, run once per program in compiled code.

``ProgramBuilder.emit`` works out an instruction's semaphore waits as it is emitted, in Python
(``hwsim.builder``: RAW always; WAR and WAW across channels; reads recorded on the bytes they
touch; a DMA queue's transfers complete in emission order). A deferred builder
(``ProgramBuilder(deferred=True)``, what kernels use) only records each instruction's channel and
operand regions, and ``resolve`` applies the same rules to the whole record in one Numba pass when
the program is built.

The Python builder is the specification: ``resolve`` keeps the same accesses (``hwsim.builder``
says what they are: bases and the fragments reads record on them), and
``tests/unit/test_deferred_deps.py`` checks that both give the same waits on every pinned program
and on random access streams. A change to the rules is made in both.

The work is linear in the program: an instruction's queries visit the live accesses that overlap
its operands (found through ``hwsim.deferred_index``'s bins), and an access is made per write,
per first read of unwritten bytes and per (read region, base it reads part of), never per pair of
earlier accesses.

Inputs are flat arrays: one row per operand region, per instruction template (an engine, a
channel and operand occurrences, shared by the instructions with one ``static_key`` and the same
untracked inputs), and per instruction (its template, or -1 - k for the k-th ``place_hbm`` step).
The output is each instruction's new waits as (channel, value) pairs in channel-name order.
"""

from __future__ import annotations

from pathlib import Path

import numba
import numpy as np

from hwsim.deferred_index import (
    ACC,
    BASE,
    BIN_BYTES,
    BIN_ROWS,
    C0,
    C1,
    C_ACC,
    C_BUCKETS,
    C_CUTS,
    C_FOUND,
    C_NODES,
    C_RBINS,
    C_RD,
    C_REG,
    C_WAITS,
    CAPACITIES,
    CH,
    FRAGMENT,
    KEY,
    LIVE,
    MAX_BINS,
    N_ACC,
    N_BUCKETS,
    N_COUNTS,
    N_CUTS,
    N_FOUND_MAX,
    N_FULL,
    N_NODES,
    N_RBINS,
    N_RD,
    N_REACHED,
    N_REG,
    N_STAMP,
    N_WAITS,
    NEXT,
    NONE,
    PITCH,
    PITCH_UNSET,
    R0,
    R1,
    REGION,
    RHEAD,
    STAMP,
    VAL,
    WCH,
    WVAL,
    add,
    append,
    bin_list,
    bucket_of,
    covers,
    new_access,
    new_bucket,
    overlapping,
    set_reader,
    slot,
)
from hwsim.kernels._jit_cache import announce_if_uncompiled

# The pass below is compiled by Numba at a fresh install's first build (about 20 s): say so.
announce_if_uncompiled(Path(__file__).resolve().parent, "program builder's dependency pass")

__all__ = [
    "BIN_BYTES",
    "BIN_ROWS",
    "CAPACITIES",
    "C_ACC",
    "C_BUCKETS",
    "C_CUTS",
    "C_FOUND",
    "C_NODES",
    "C_RBINS",
    "C_RD",
    "C_REG",
    "C_WAITS",
    "DONE",
    "INPUT",
    "MAX_BINS",
    "WRITE",
    "resolve",
]

#: Operand flags: written (else read); an HBM input tensor no instruction had written when this
#: one was emitted (untracked: its reads are counted per channel, not as accesses).
WRITE = 1
INPUT = 2

#: ``resolve``'s status: done, or 1 + the ``capacities`` entry of a table that was full (the
#: caller retries with that one larger).
DONE = 0


def region_bins(regions: np.ndarray) -> np.ndarray:
    """How many bins each of these regions (rows of ``resolve``'s region table) sits in if it
    has its key's pitch (``bin_list``'s count; 0: in no bin)."""
    pitch = regions[:, PITCH]
    cols = (regions[:, C1] - 1) // BIN_BYTES - regions[:, C0] // BIN_BYTES + 1
    row_bins = (regions[:, R1] - 1) // BIN_ROWS - regions[:, R0] // BIN_ROWS + 1
    rows = np.where(pitch == 0, 1, row_bins)
    bins = np.maximum(rows, 0) * np.maximum(cols, 0)
    bins[(regions[:, R1] <= regions[:, R0]) | (bins > MAX_BINS)] = 0
    return bins


def first_capacities(given: np.ndarray, operands: int, places: int, n_instr: int) -> np.ndarray:
    """``resolve``'s first table sizes for a record of ``given`` regions, ``operands`` operand
    occurrences, ``places`` ``place_hbm`` steps and ``n_instr`` instructions: accesses number
    under the operand occurrences (most reads find their writer, most writes kill what they
    replace), fragments about a quarter of them; an access sits in about as many bins as the
    given regions do."""
    bins = int(region_bins(given).sum())
    per_region = bins / max(1, len(given))
    fragments = operands // 4 + 1024
    accesses = 3 * operands // 4 + fragments + 64 * places
    capacities = np.zeros(len(CAPACITIES), np.int64)
    capacities[C_REG] = fragments
    capacities[C_ACC] = accesses
    capacities[C_RD] = accesses
    capacities[C_NODES] = int((per_region + 1) * accesses)
    capacities[C_BUCKETS] = bins + 1024
    capacities[C_RBINS] = bins + 1024
    capacities[C_CUTS] = fragments
    capacities[C_WAITS] = n_instr + 1024
    capacities[C_FOUND] = accesses  # one int64 per access: a query can find every live one
    return capacities


def grown(capacities: np.ndarray, status: int, counts: np.ndarray, n_given: int, n_keys: int,
          n_instr: int) -> np.ndarray:  # fmt: skip
    """The capacities for a retry after ``resolve`` stopped with ``status`` (a table full)
    having used ``counts``: each table sized for its use so far extrapolated to the whole
    program (with a quarter more), the full one at least doubled; so a retry or two suffice
    however far off the first guesses were."""
    used = np.array(
        [
            counts[N_REG] - n_given,
            counts[N_ACC],
            counts[N_RD],
            counts[N_NODES],
            counts[N_BUCKETS] - n_keys,
            counts[N_RBINS],
            counts[N_CUTS],
            counts[N_WAITS],
            counts[N_FOUND_MAX],
        ],
        dtype=np.float64,
    )
    scale = 1.25 * n_instr / max(1, int(counts[N_REACHED]) + 1)
    wanted = np.maximum(capacities, (used * scale).astype(np.int64) + 16)
    wanted[status - 1] = max(wanted[status - 1], 2 * capacities[status - 1])
    wanted[C_FOUND] = max(wanted[C_FOUND], wanted[C_ACC])
    return wanted


class _Tables:
    """Documentation only (Numba passes the arrays one by one): the state ``resolve`` keeps.

    reg[n, 6]: regions. acc[n, 6]: accesses. rd[n, 3]: reader nodes. nodes[n, 2]: bucket
    nodes (a bucket holds two linked lists of accesses, bases and fragments). b_head/b_tail[n,
    2]: a bucket's first and last node per list; b_next[n]: the key's next bucket in the order
    made.
    k_pitch/k_first/k_last/k_others[n]: per memory key its index's pitch, first and last
    bucket, and the bucket of its accesses in no bin. r_binned/r_bin0/r_bin1 per given region:
    not seen yet (-1), in no bin (0) or binned (1), and its buckets as a range of ``rbins``.
    cuts: (base, read region) -> the fragment that read recorded on the base. counts: how much
    of each table is used.
    """


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
def _bin_region(rid, key, k_pitch, reg, r_binned, r_bin0, r_bin1, rbins, bins, counts, b_head,
                b_tail, b_next, k_first, k_last):  # fmt: skip
    """``_CoreTracker.operand``: a given region's index pitch and buckets, found once. False:
    a table is full (status set)."""
    if k_pitch[key] == PITCH_UNSET:
        k_pitch[key] = reg[rid, PITCH]
    keys = bin_list(k_pitch[key], reg[rid, R0], reg[rid, R1], reg[rid, C0], reg[rid, C1])
    r_binned[rid] = 0
    if reg[rid, PITCH] != k_pitch[key] or keys.shape[0] == 0:
        return True
    if counts[N_RBINS] + keys.shape[0] > rbins.shape[0]:
        counts[N_FULL] = 1 + C_RBINS
        return False
    r_bin0[rid] = counts[N_RBINS]
    for k in range(keys.shape[0]):
        b = bucket_of(
            key, keys[k, 0], keys[k, 1], bins, counts, b_head, b_tail, b_next, k_first, k_last
        )
        if b == NONE:
            return False
        rbins[counts[N_RBINS]] = b
        counts[N_RBINS] += 1
    r_bin1[rid] = counts[N_RBINS]
    r_binned[rid] = 1
    return True


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
    values, counts). ``capacities`` sizes the tables (``CAPACITIES``); a status other than
    DONE names one that was too small: retry with ``grown`` capacities."""
    n_channels = channel_rank.shape[0]
    n_given = given_regions.shape[0]
    empty = np.zeros(0, np.int64)
    # Tables (``_Tables``).
    reg = np.empty((n_given + capacities[C_REG], 6), np.int64)
    reg[:n_given] = given_regions
    acc = np.empty((capacities[C_ACC], 6), np.int64)
    rd = np.empty((capacities[C_RD], 3), np.int64)
    nodes = np.empty((capacities[C_NODES], 2), np.int64)
    n_bucket_cap = capacities[C_BUCKETS] + n_keys
    bucket_table_rows = 16
    while bucket_table_rows < 2 * n_bucket_cap:
        bucket_table_rows *= 2
    cut_table_rows = 16
    while cut_table_rows < 2 * capacities[C_CUTS]:
        cut_table_rows *= 2
    b_head = np.empty((n_bucket_cap, 2), np.int64)
    b_tail = np.empty((n_bucket_cap, 2), np.int64)
    b_next = np.empty(n_bucket_cap, np.int64)
    rbins = np.empty(capacities[C_RBINS], np.int64)
    counts = np.zeros(N_COUNTS, np.int64)
    counts[N_REG] = n_given
    k_pitch = np.full(n_keys, PITCH_UNSET, np.int64)
    k_first = np.full(n_keys, NONE, np.int64)
    k_last = np.full(n_keys, NONE, np.int64)
    k_others = np.empty(n_keys, np.int64)
    for key in range(n_keys):
        k_others[key] = new_bucket(counts, b_head, b_tail, b_next)
    r_binned = np.full(n_given, -1, np.int64)
    r_bin0 = np.zeros(n_given, np.int64)
    r_bin1 = np.zeros(n_given, np.int64)
    # What a query reads (``overlapping``), in one argument.
    index = (reg, r_binned, r_bin0, r_bin1, rbins, acc, nodes, b_head, b_tail, b_next, k_first,
             k_others)  # fmt: skip
    # Hash tables (``slot``): (key, row bin, column bin) -> bucket; (base, read region, 0) ->
    # the fragment that read recorded on it.
    bins = np.full((bucket_table_rows, 4), NONE, np.int64)
    cuts = np.full((cut_table_rows, 4), NONE, np.int64)
    # ``_CoreTracker``'s counters.
    counts_ch = np.zeros(n_channels, np.int64)
    satisfied = np.zeros((n_engines, n_channels), np.int64)
    queue_engine = np.full(n_channels, NONE, np.int64)
    input_readers = np.zeros((n_keys, n_channels), np.int64)
    needs = np.zeros(n_channels, np.int64)
    touched = np.empty(n_channels, np.int64)
    found = np.empty(capacities[C_FOUND], np.int64)

    n_instr = instr_template.shape[0]
    wait_end = np.zeros(n_instr, np.int64)
    wait_ch = np.empty(capacities[C_WAITS], np.int64)
    wait_val = np.empty(capacities[C_WAITS], np.int64)
    n_waits = 0

    for i in range(n_instr):
        counts[N_REACHED] = i
        counts[N_WAITS] = n_waits
        t = instr_template[i]
        if t < 0:  # ``place_hbm``
            if not _place(
                -t - 1, place_whole, place_key, place_earlier_end, place_earlier, reg, acc, rd,
                nodes, b_head, b_tail, b_next, k_pitch, k_first, k_others, counts, n_channels,
            ):  # fmt: skip
                return counts[N_FULL], wait_end, empty, empty, counts
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
            key = reg[rid, KEY]
            if r_binned[rid] < 0 and not _bin_region(
                rid, key, k_pitch, reg, r_binned, r_bin0, r_bin1, rbins, bins, counts, b_head,
                b_tail, b_next, k_first, k_last,
            ):  # fmt: skip
                return counts[N_FULL], wait_end, empty, empty, counts
            if (flags & INPUT) != 0:
                if is_write:  # an input overwritten: wait for every earlier reader of it
                    for c in range(n_channels):
                        if c != channel:
                            n_touched = _need(needs, touched, n_touched, c, input_readers[key, c])
                continue  # reads of an untracked input wait for nothing
            # A read depends on the writers of the bases it overlaps; a write also on the
            # readers of the bases and fragments it overlaps (a fragment has no writer).
            n_found = overlapping(rid, 2 if is_write else 1, counts, found, index)
            if n_found < 0:
                return counts[N_FULL], wait_end, empty, empty, counts
            for j in range(n_found):
                a = found[j]
                wch = acc[a, WCH]
                if wch != NONE and (not is_write or wch != channel):
                    # RAW (also on the channel); WAW across channels
                    n_touched = _need(needs, touched, n_touched, wch, acc[a, WVAL])
                if is_write:
                    node = acc[a, RHEAD]
                    while node != NONE:
                        if rd[node, CH] != channel:  # WAR across channels
                            n_touched = _need(
                                needs, touched, n_touched, rd[node, CH], rd[node, VAL]
                            )
                        node = rd[node, NEXT]
        if t_is_dma[t]:
            # Completion k of a queue is its k-th transfer: a trigger from another engine than
            # the previous one waits for the previous transfer.
            previous = queue_engine[channel]
            if previous != NONE and previous != engine:
                n_touched = _need(needs, touched, n_touched, channel, seq - 1)
            queue_engine[channel] = engine
        # ``_new_waits``: in channel-name order, those the stream has not waited for yet.
        if n_touched:
            if n_waits + n_touched > wait_ch.shape[0]:
                counts[N_FULL] = 1 + C_WAITS
                return counts[N_FULL], wait_end, empty, empty, counts
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
            key = reg[rid, KEY]
            if (flags & INPUT) != 0:
                input_readers[key, channel] = seq
                continue
            n_found = overlapping(rid, 1, counts, found, index)
            if n_found < 0:
                return counts[N_FULL], wait_end, empty, empty, counts
            if n_found == 0:  # bytes nothing wrote: a base of its own
                a = new_access(rid, NONE, 0, counts, acc)
                if a == NONE or not set_reader(a, channel, seq, counts, acc, rd):
                    return counts[N_FULL], wait_end, empty, empty, counts
                if not add(
                    a, rid, r_binned, r_bin0, r_bin1, rbins, k_others, reg, counts, nodes, b_head,
                    b_tail,
                ):  # fmt: skip
                    return counts[N_FULL], wait_end, empty, empty, counts
                continue
            for j in range(n_found):
                a = found[j]
                other = acc[a, REGION]
                # A base it covers, or one of another pitch (no box in common: conservative),
                # takes the reader itself.
                if covers(reg, rid, other) or reg[other, PITCH] != reg[rid, PITCH]:
                    if not set_reader(a, channel, seq, counts, acc, rd):
                        return counts[N_FULL], wait_end, empty, empty, counts
                    continue
                # Else the fragment base & rid takes it: made once per (base, read region)
                # while it lives.
                cut = slot(cuts, a, rid, 0)
                if cuts[cut, 0] != NONE and acc[cuts[cut, 3], LIVE] == 1:
                    if not set_reader(cuts[cut, 3], channel, seq, counts, acc, rd):
                        return counts[N_FULL], wait_end, empty, empty, counts
                    continue
                part = counts[N_REG]
                if part == reg.shape[0]:
                    counts[N_FULL] = 1 + C_REG
                    return counts[N_FULL], wait_end, empty, empty, counts
                counts[N_REG] = part + 1
                reg[part, KEY] = key
                reg[part, PITCH] = reg[rid, PITCH]
                reg[part, R0] = max(reg[other, R0], reg[rid, R0])
                reg[part, R1] = min(reg[other, R1], reg[rid, R1])
                reg[part, C0] = max(reg[other, C0], reg[rid, C0])
                reg[part, C1] = min(reg[other, C1], reg[rid, C1])
                made = new_access(part, NONE, 0, counts, acc)
                if made == NONE or not set_reader(made, channel, seq, counts, acc, rd):
                    return counts[N_FULL], wait_end, empty, empty, counts
                keys = bin_list(
                    k_pitch[key], reg[part, R0], reg[part, R1], reg[part, C0], reg[part, C1]
                )
                if reg[part, PITCH] != k_pitch[key] or keys.shape[0] == 0:
                    if not append(k_others[key], FRAGMENT, made, counts, nodes, b_head, b_tail):
                        return counts[N_FULL], wait_end, empty, empty, counts
                else:
                    for k in range(keys.shape[0]):
                        b = bucket_of(
                            key, keys[k, 0], keys[k, 1], bins, counts, b_head, b_tail, b_next,
                            k_first, k_last,
                        )  # fmt: skip
                        if b == NONE or not append(
                            b, FRAGMENT, made, counts, nodes, b_head, b_tail
                        ):
                            return counts[N_FULL], wait_end, empty, empty, counts
                if cuts[cut, 0] == NONE:
                    counts[N_CUTS] += 1
                    if 2 * counts[N_CUTS] > cuts.shape[0]:  # keep the table at most half full
                        counts[N_FULL] = 1 + C_CUTS
                        return counts[N_FULL], wait_end, empty, empty, counts
                cuts[cut, 0] = a
                cuts[cut, 1] = rid
                cuts[cut, 2] = 0
                cuts[cut, 3] = made
        # ---- record pass: its writes (what they cover is dead) ------------------------------
        for o in range(op0, op1):
            if (op_flags[o] & WRITE) == 0:
                continue
            rid = op_region[o]
            n_found = overlapping(rid, 2, counts, found, index)
            if n_found < 0:
                return counts[N_FULL], wait_end, empty, empty, counts
            for j in range(n_found):
                a = found[j]
                if covers(reg, rid, acc[a, REGION]):
                    acc[a, LIVE] = 0
            a = new_access(rid, channel, seq, counts, acc)
            if a == NONE or not add(
                a, rid, r_binned, r_bin0, r_bin1, rbins, k_others, reg, counts, nodes, b_head,
                b_tail,
            ):  # fmt: skip
                return counts[N_FULL], wait_end, empty, empty, counts
    counts[N_WAITS] = n_waits
    return DONE, wait_end, wait_ch[:n_waits].copy(), wait_val[:n_waits].copy(), counts


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
        if k_pitch[key] == PITCH_UNSET:  # no index: nothing touched it
            continue
        # ``live_accesses`` of both kinds: each once (buckets in the order made, others).
        for kind in range(2):
            bucket = k_first[key]
            counts[N_STAMP] += 1
            stamp = counts[N_STAMP]
            while True:
                if bucket == NONE:
                    bucket = k_others[key]
                    last = True
                else:
                    last = False
                node = b_head[bucket, kind]
                while node != NONE:
                    a = nodes[node, ACC]
                    node = nodes[node, 1]
                    if acc[a, LIVE] == 0 or acc[a, STAMP] == stamp:
                        continue
                    acc[a, STAMP] = stamp
                    c = acc[a, WCH]
                    if c != NONE:
                        any_access = True
                        if writers[c] == 0:
                            writer_order[n_writers] = c
                            n_writers += 1
                        writers[c] = max(writers[c], acc[a, WVAL])
                    r = acc[a, RHEAD]
                    while r != NONE:
                        any_access = True
                        readers[rd[r, CH]] = max(readers[rd[r, CH]], rd[r, VAL])
                        r = rd[r, NEXT]
                if last:
                    break
                bucket = b_next[bucket]
    if not any_access:
        return True
    whole = place_whole[p]
    key = place_key[p]
    if k_pitch[key] == PITCH_UNSET:  # ``tracker.index(whole)``: made with its pitch
        k_pitch[key] = reg[whole, PITCH]
    first = NONE
    for w in range(max(n_writers, 1)):
        if n_writers:
            channel = writer_order[w]
            made = new_access(whole, channel, writers[channel], counts, acc)
        else:
            made = new_access(whole, NONE, 0, counts, acc)
        if made == NONE or not append(k_others[key], BASE, made, counts, nodes, b_head, b_tail):
            return False
        if first == NONE:
            first = made
    for c in range(n_channels):
        if readers[c] > 0 and not set_reader(first, c, readers[c], counts, acc, rd):
            return False
    return True
