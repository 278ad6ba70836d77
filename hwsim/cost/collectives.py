"""What a collective costs on the topology: placement of ranks, hop classes, and the documented
algorithms (HARDWARE.md §1.2 [S32]: Ring, Mesh, RDH, KangaRing).

A collective over N ranks is a sequence of *steps*; in a step every rank sends to its peer(s) at
once, and a step costs the slowest rank's ``hop latency + bytes / bandwidth`` over the class of
link it uses (``topology.intra_chip``, ``chip_to_chip``, ``instance_to_instance``). A step's bytes
are also read and written in HBM (``collectives.hbm_touches_per_*_byte``), whose stack bandwidth
the rank shares with the other cores of its stack: a step takes at least
``touches x bytes / (stack bandwidth x cores of the rank / cores per stack)``.

With C = the bytes of one rank's chunk (B / N of an all-reduce's buffer B):

- **ring**: the ranks in a cycle along the topology; all-gather and reduce-scatter are N - 1
  steps of C, all-reduce both (2(N - 1) steps), all-to-all N - 1 pairwise steps of C. A chip-to-
  chip hop uses every link of the chip at once when the group holds every chip of the instance
  (the disjoint Hamiltonian cycles of a torus, run both ways [S32]), else one link each way.
- **mesh**: one step per phase; each rank writes straight to every peer (routed through the
  chips between), so the chips' links carry ``bytes x hops`` and are over-subscribed [S32].
- **rdh** (recursive halving then doubling; N a power of two): log2 N steps per phase, step k
  moving B / 2^(k+1) to the partner 2^k ranks away.
- **kangaring**: the ranks of a chip in pairs, only the primary of each pair in the ring
  (N/2 hops, two chunks a step), HBM touches cut by a quarter (forwarding) and a third
  (reducing) by duplicated writes [S32]. Applies when the group holds every rank of each of its
  chips, an even number [S32].
- **auto**: the fastest that applies (the runtime picks by message size [S32]).

A collective also costs ``collectives.launch_ns`` once all ranks have arrived. Bytes per link
are counted per rank (what one rank sends over each class of link).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Literal

from hwsim.config.schema import HardwareConfig

Kind = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "permute", "broadcast"]
LINK_CLASSES = ("intra_chip", "chip_to_chip", "instance_to_instance")
ALGORITHMS = ("ring", "mesh", "rdh", "kangaring")


@dataclass(frozen=True)
class Place:
    """Where a rank sits: its instance, its chip (global index), and its first physical core."""

    instance: int
    chip: int
    core: int


@dataclass(frozen=True)
class CollectiveCost:
    """One collective's modelled cost: the algorithm, its steps, its duration (ns, after every
    rank arrived), the bytes one rank sends over each class of link, and the bytes one rank
    reads and writes in HBM (its steps' bytes times their HBM touches): what it takes of its
    stack's bandwidth beside the DMA engines (``hwsim.machine.dma.DmaSystem.reserve``)."""

    algorithm: str
    steps: int
    duration_ns: Fraction
    link_bytes: dict[str, int] = field(default_factory=dict)
    hbm_bytes: int = 0


@dataclass(frozen=True)
class _Hop:
    link: str  # a LINK_CLASSES name
    latency_ns: Fraction
    bandwidth: Fraction  # bytes/ns a rank gets over it
    hbm: Fraction  # bytes/ns of HBM a rank gets (its share of its stack)


class Topology:
    """Placement and hops of ranks on a config's chip and topology."""

    def __init__(self, config: HardwareConfig) -> None:
        self.config = config
        topo = config.topology
        self.cores_per_chip = config.chip.cores_per_chip
        self.chips = topo.chips_per_instance
        self.cols = topo.chips_per_instance // topo.torus_rows
        hbm = config.hbm
        self.stack_share = Fraction(str(hbm.bandwidth_bytes_per_ns_per_stack)) / hbm.cores_per_stack

    def place(self, core: int) -> Place:
        chip = core // self.cores_per_chip
        return Place(chip // self.chips, chip, core)

    def chip_distance(self, a: int, b: int) -> int:
        """Chip-to-chip hops between chips ``a`` and ``b`` of one instance."""
        if a == b:
            return 0
        kind = self.config.topology.chip_interconnect
        pa, pb = a % self.chips, b % self.chips
        if kind == "switch":
            return 1
        if kind == "ring":
            d = abs(pa - pb)
            return min(d, self.chips - d)
        (ra, ca), (rb, cb) = divmod(pa, self.cols), divmod(pb, self.cols)
        rows = self.chips // self.cols
        dr, dc = abs(ra - rb), abs(ca - cb)
        return min(dr, rows - dr) + min(dc, self.cols - dc)

    def ring_position(self, place: Place) -> tuple[int, int, int]:
        """Order of a rank along a ring of the topology: by instance, then chips in a snake over
        the torus rows (each next chip a neighbour), then core."""
        position = place.chip % self.chips
        if self.config.topology.chip_interconnect == "torus2d":
            row, col = divmod(position, self.cols)
            position = row * self.cols + (col if row % 2 == 0 else self.cols - 1 - col)
        return (place.instance, position, place.core)

    def hop(self, a: Place, b: Place, cores_per_rank: int, all_chips: bool) -> _Hop:
        """What sending from rank ``a`` to rank ``b`` costs per byte and per step."""
        topo = self.config.topology
        hbm = self.stack_share * cores_per_rank
        if a.instance != b.instance:
            link = topo.instance_to_instance
            return _Hop(
                "instance_to_instance",
                _f(link.hop_latency_ns),
                _f(link.bandwidth_bytes_per_ns),
                hbm,
            )
        if a.chip != b.chip:
            link = topo.chip_to_chip
            links = topo.links_per_chip if all_chips else min(2, topo.links_per_chip)
            hops = self.chip_distance(a.chip, b.chip)
            return _Hop(
                "chip_to_chip",
                _f(link.hop_latency_ns) * hops,
                _f(link.bandwidth_bytes_per_ns) * links,
                hbm,
            )
        link = topo.intra_chip
        return _Hop(
            "intra_chip",
            _f(link.hop_latency_ns),
            _f(link.bandwidth_bytes_per_ns) * cores_per_rank,
            hbm,
        )


def _f(value: float) -> Fraction:
    return Fraction(str(value))


def _step_ns(hop: _Hop, nbytes: Fraction, touches: Fraction | int) -> Fraction:
    """One step's time: the hop's latency, then the bytes over the link or through HBM,
    whichever is slower."""
    wire = nbytes / hop.bandwidth
    memory = touches * nbytes / hop.hbm if touches else Fraction(0)
    return hop.latency_ns + max(wire, memory)


class CollectiveCosts:
    """The collectives of one config (``CostModel.collectives``): ``of(...)`` per collective."""

    def __init__(self, config: HardwareConfig) -> None:
        self.config = config
        self.topology = Topology(config)
        self._memo: dict[tuple[object, ...], CollectiveCost] = {}

    def of(
        self,
        kind: Kind,
        nbytes: int,
        group: tuple[int, ...],
        cores_per_rank: int = 1,
        algorithm: str | None = None,
        pair: tuple[int, int] = (0, 1),
    ) -> CollectiveCost:
        """The cost of a collective of ``kind`` over the ranks whose first physical cores are
        ``group``. ``nbytes``: all_reduce and broadcast, the buffer; all_gather, one rank's
        input; reduce_scatter, one rank's output; all_to_all, one rank's input; permute, what one
        rank sends. ``algorithm``: one of ``ALGORITHMS``, or None for the config's choice.
        ``pair``: permute, the ranks (indices into ``group``) of the one transfer it times."""
        choice = algorithm or self.config.collectives.algorithm
        key = (kind, nbytes, group, cores_per_rank, choice, pair if kind == "permute" else None)
        found = self._memo.get(key)
        if found is None:
            found = self._work_out(kind, nbytes, group, cores_per_rank, choice, pair)
            self._memo[key] = found
        return found

    def _work_out(
        self,
        kind: Kind,
        nbytes: int,
        group: tuple[int, ...],
        cores_per_rank: int,
        choice: str,
        pair: tuple[int, int],
    ) -> CollectiveCost:
        launch = _f(self.config.collectives.launch_ns)
        if len(group) < 2 or nbytes == 0:
            return CollectiveCost("local", 0, launch if len(group) >= 2 else Fraction(0))
        if kind == "permute":
            sender, receiver = (self.topology.place(group[i]) for i in pair)
            hop = self.topology.hop(sender, receiver, cores_per_rank, all_chips=False)
            touches = self.config.collectives.hbm_touches_per_copy_byte
            step = _step_ns(hop, Fraction(nbytes), touches)
            return CollectiveCost("direct", 1, step + launch, {hop.link: nbytes}, nbytes * touches)
        plan = _Plan(self, kind, nbytes, group, cores_per_rank)
        names = ALGORITHMS if choice == "auto" else (choice,)
        options = [cost for name in names if (cost := plan.cost(name)) is not None]
        if not options:
            raise ValueError(
                f"collective {kind} over {len(group)} ranks: algorithm '{choice}' does not apply "
                f"({_WHY.get(choice, '')}); use auto or ring"
            )
        best = min(options, key=lambda c: (c.duration_ns, ALGORITHMS.index(c.algorithm)))
        return replace(best, duration_ns=best.duration_ns + launch)


_WHY = {
    "rdh": "it needs a power-of-two group",
    "kangaring": "it needs every rank of each of the group's chips, an even number",
}


class _Plan:
    """One collective's ranks in ring order and the hops between them."""

    def __init__(
        self,
        costs: CollectiveCosts,
        kind: Kind,
        nbytes: int,
        group: tuple[int, ...],
        cores_per_rank: int,
    ) -> None:
        topo = costs.topology
        self.config = costs.config
        self.topo = topo
        self.kind = kind
        self.n = len(group)
        self.places = sorted((topo.place(core) for core in group), key=topo.ring_position)
        chips = {p.chip for p in self.places}
        instances = {p.instance for p in self.places}
        self.all_chips = len(chips) == topo.chips * len(instances)
        self.cores_per_rank = cores_per_rank
        whole = kind in ("all_reduce", "broadcast", "all_to_all")  # nbytes is the whole buffer
        self.chunk = Fraction(nbytes, self.n) if whole else Fraction(nbytes)
        self.per_chip: dict[int, int] = {}
        for place in self.places:
            self.per_chip[place.chip] = self.per_chip.get(place.chip, 0) + 1

    def hop(self, i: int, j: int) -> _Hop:
        a, b = self.places[i % self.n], self.places[j % self.n]
        return self.topo.hop(a, b, self.cores_per_rank, self.all_chips)

    def phases(self) -> list[str]:
        """'copy' and 'reduce' phases of the collective (what HBM touches they cost)."""
        return {
            "all_reduce": ["reduce", "copy"],
            "reduce_scatter": ["reduce"],
            "all_gather": ["copy"],
            "broadcast": ["copy", "copy"],
            "all_to_all": ["copy"],
        }[self.kind]

    def touches(self, phase: str) -> int:
        c = self.config.collectives
        return c.hbm_touches_per_reduce_byte if phase == "reduce" else c.hbm_touches_per_copy_byte

    def step_ns(self, hop: _Hop, nbytes: Fraction, touches: Fraction | int) -> Fraction:
        return _step_ns(hop, nbytes, touches)

    def cost(self, algorithm: str) -> CollectiveCost | None:
        return {
            "ring": self._ring,
            "mesh": self._mesh,
            "rdh": self._rdh,
            "kangaring": self._kangaring,
        }[algorithm]()

    # ---- the algorithms ---------------------------------------------------------------------
    def _ring(self) -> CollectiveCost:
        """Every rank sends to its ring successor: N - 1 steps of one chunk per phase."""
        hops = [self.hop(i, i + 1) for i in range(self.n)]
        total, steps, sent, hbm = Fraction(0), 0, _Bytes(), Fraction(0)
        for phase in self.phases():
            step = max(self.step_ns(h, self.chunk, self.touches(phase)) for h in hops)
            total += step * (self.n - 1)
            steps += self.n - 1
            hbm += self.chunk * self.touches(phase) * (self.n - 1)
            for h in hops:
                sent.add(h.link, self.chunk * (self.n - 1) / self.n)
        return CollectiveCost("ring", steps, total, sent.rounded(), round(hbm))

    def _mesh(self) -> CollectiveCost:
        """One step per phase: each rank writes its chunk to every peer at once; a chip's
        outgoing links carry every byte its ranks send off chip times the hops it travels."""
        total, sent = Fraction(0), _Bytes()
        per_phase = Fraction(0)
        for i in range(self.n):
            per_link: dict[str, Fraction] = {}
            latency = Fraction(0)
            hbm = Fraction(1)
            for j in range(self.n):
                if i == j:
                    continue
                hop = self.hop(i, j)
                hbm = hop.hbm
                latency = max(latency, hop.latency_ns)
                load = self.chunk
                if hop.link == "chip_to_chip":  # the chip's ranks share its links, over the path
                    a, b = self.places[i].chip, self.places[j].chip
                    hops = self.topo.chip_distance(a, b)
                    load = self.chunk * self.per_chip[a] * hops
                per_link[hop.link] = per_link.get(hop.link, Fraction(0)) + load / hop.bandwidth
                sent.add(hop.link, self.chunk / self.n)
            wire = max(per_link.values(), default=Fraction(0))
            memory = (self.n - 1) * self.chunk * max(self.touches(p) for p in self.phases()) / hbm
            per_phase = max(per_phase, latency + max(wire, memory))
        phases = len(self.phases())
        total = per_phase * phases
        sent.scale(phases)
        touches = max(self.touches(p) for p in self.phases())
        hbm = (self.n - 1) * self.chunk * touches * phases
        return CollectiveCost("mesh", phases, total, sent.rounded(), round(hbm))

    def _rdh(self) -> CollectiveCost | None:
        """Recursive halving (reduce phases) and doubling (copy phases): log2 N steps each,
        step k exchanging half of what is left with the partner 2^k ranks away."""
        n = self.n
        if n & (n - 1) or self.kind == "all_to_all":
            return None
        rounds = int(math.log2(n))
        total, steps, sent, hbm = Fraction(0), 0, _Bytes(), Fraction(0)
        buffer = self.chunk * n  # everything one rank holds at the start of a halving
        for phase in self.phases():
            for k in range(rounds):
                size = buffer / 2 ** (k + 1)
                hops = [self.hop(i, i ^ (1 << k)) for i in range(n)]
                total += max(self.step_ns(h, size, self.touches(phase)) for h in hops)
                hbm += size * self.touches(phase)
                for h in hops:
                    sent.add(h.link, size / n)
                steps += 1
        return CollectiveCost("rdh", steps, total, sent.rounded(), round(hbm))

    def _kangaring(self) -> CollectiveCost | None:
        """The ring over the primary rank of each pair on a chip: N/2 - 1 steps of two chunks
        per phase, plus one step within the pair; duplicated writes cut HBM touches [S32]."""
        whole = self.topo.cores_per_chip // self.cores_per_rank  # ranks a chip holds
        if (
            self.kind == "all_to_all"
            or whole % 2
            or any(count != whole for count in self.per_chip.values())
        ):
            return None
        primaries = list(range(0, self.n, 2))
        m = len(primaries)
        hops = [self.hop(primaries[i], primaries[(i + 1) % m]) for i in range(m)]
        pair = self.hop(0, 1)
        total, steps, sent, hbm = Fraction(0), 0, _Bytes(), Fraction(0)
        for phase in self.phases():
            cut = Fraction(2, 3) if phase == "reduce" else Fraction(3, 4)
            touches = self.touches(phase) * cut
            hbm += self.chunk * touches  # the step within the pair (and the ring: a primary's)
            if m > 1:
                step = max(self.step_ns(h, 2 * self.chunk, touches) for h in hops)
                total += step * (m - 1)
                steps += m - 1
                hbm += 2 * self.chunk * touches * (m - 1)
                for h in hops:
                    sent.add(h.link, 2 * self.chunk * (m - 1) / self.n)
            total += self.step_ns(pair, self.chunk, touches)
            steps += 1
            sent.add(pair.link, self.chunk / 2)
        return CollectiveCost("kangaring", steps, total, sent.rounded(), round(hbm))


class _Bytes:
    """Bytes one rank sends, averaged over the ranks, by link class."""

    def __init__(self) -> None:
        self.by_link: dict[str, Fraction] = {}

    def add(self, link: str, nbytes: Fraction) -> None:
        self.by_link[link] = self.by_link.get(link, Fraction(0)) + nbytes

    def scale(self, factor: int) -> None:
        self.by_link = {k: v * factor for k, v in self.by_link.items()}

    def rounded(self) -> dict[str, int]:
        return {k: round(v) for k, v in self.by_link.items() if v}
