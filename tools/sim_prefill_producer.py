#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Replays the mbarrier protocol of the wgmma prefill's producer
(cl/prefill_nv.cl, LZ_NV_PRODUCER: lz_nv_produce and the consumer loop of
lz_prefill_nv_rows) under random interleavings, on the host.

Actors: the producer's copying warps (LZ_NV_PWARPS 1, 2 or 4: one doing all,
or K + entries and V, or two of each with half of every tile's copies each),
W consumer warps, and one copy engine per copying warp, which lands that
warp's cp.async copies in order at random later times and then makes their
asynchronous mbarrier arrivals (cp.async.mbarrier.arrive.noinc). The
mbarriers follow PTX: a count of arrivals a phase, and a wait for the phase
of a parity, which succeeds once that phase has completed (so a waiter must
never be two phases behind, nor wait for a phase before the one before it
has completed: both checked). For every interleaving tried, checks:
  - no deadlock; every consumer sees every visible tile, in order, then the end;
  - a consumer reads a meta slot only when it holds the item it expects
    (written before the arrival, not yet overwritten);
  - no wgmma reads a K or V slot while a copy into it is in flight, and no
    copy is issued into a slot that a wgmma may still read;
  - each read slot holds the tile expected.
Exits 1 on the first violation, printing the configuration and seed.
  usage: sim_prefill_producer.py [RUNS_PER_CONFIG]
"""
import random
import sys


class Violation(Exception):
    pass


class MBarrier:
    def __init__(self, name, count):
        self.name, self.count, self.pending, self.completed = name, count, count, 0
        self.tx = 0  # bytes (here: copies) still expected this phase

    def arrive(self, n=1, expect_tx=0):
        """n arrivals; expect_tx: mbarrier.arrive.expect_tx's bytes expected first"""
        self.tx += expect_tx
        self.pending -= n
        if self.pending < 0:
            raise Violation(f"{self.name}: more arrivals than its count in phase {self.completed}")
        self._complete()

    def complete_tx(self, n=1):
        """a cp.async.bulk's complete_tx"""
        self.tx -= n
        self._complete()

    def _complete(self):
        if self.pending == 0 and self.tx == 0:
            self.completed += 1
            self.pending = self.count

    def ready(self, parity, phase_wanted):
        """A wait for `parity`, by a waiter that means phase `phase_wanted`."""
        if self.completed > phase_wanted + 1:
            raise Violation(f"{self.name}: waiter for phase {phase_wanted} is two phases behind "
                            f"({self.completed} completed): parity is ambiguous")
        if self.completed < phase_wanted:
            raise Violation(f"{self.name}: waiter for phase {phase_wanted} while phase {self.completed} "
                            "is not complete: the parity would pass at once")
        assert parity == phase_wanted & 1
        # the phase of this parity has completed <=> the current phase's parity differs
        return (self.completed & 1) != parity


class NamedBarrier:
    """bar.sync / bar.arrive of `count` warps a phase (the turns of LZ_NV_PINGPONG)."""

    def __init__(self, name, count):
        self.name, self.count, self.arrived, self.completed = name, count, 0, 0

    def arrive(self):
        """One warp's arrival; returns the phase it joined."""
        phase = self.completed
        self.arrived += 1
        if self.arrived == self.count:
            self.arrived, self.completed = 0, self.completed + 1
        return phase


def wait_phase(bar, phase):
    """An mbarrier.try_wait.parity loop for that phase (a step each failed try)."""
    while not bar.ready(phase & 1, phase):
        yield


def simulate(ks_slots, n_tiles, n_warps, rng, bug=None, stats=None, pwarps=1, pingpong=False, vs_slots=2,
             pp_early=True, bulk=False):
    """bug: a deliberate error in the protocol, which the checks must catch
    (main's self-test): "meta" one meta slot too few, "release" the K slot
    given back before its scores are waited for, "vwait" V refilled without
    waiting for its slot, "parity" the producer's empty-wait one phase off,
    "count" a K full barrier counting one copying warp too few, "turn" the
    last warpgroup handing on the turn after the last round (pingpong).
    pingpong: the consumers of LZ_NV_PINGPONG (warpgroups of 4 warps taking
    turns through named barriers of 8 warps); vs_slots: V slots
    (LZ_NV_PVSLOTS); pp_early: the ping-pong waits for V before its turn
    (LZ_NV_PP_EARLY 1) or inside it, after issuing the scores (0); bulk: a
    tiled pool's full pages (LZ_NV_BULK), one cp.async.bulk a slot by thread
    0 of the role's first warp, which arms the full barrier first with an
    arrival of its own (the count one higher; bug "bulk" leaves it out)."""
    kwarps = 1 if pwarps == 1 else pwarps // 2  # copying warps a role (LZ_NV_KWARPS)
    nmeta = ks_slots + (0 if bug == "meta" else 1)
    nbulk = 1 if bulk and bug != "bulk" else 0
    kcount = 32 * (kwarps - (1 if bug == "count" else 0)) + 1 + nbulk
    kfull = [MBarrier(f"kfull{s}", kcount) for s in range(ks_slots)]
    kempty = [MBarrier(f"kempty{s}", n_warps) for s in range(ks_slots)]
    vfull = [MBarrier(f"vfull{s}", 32 * kwarps + nbulk) for s in range(vs_slots)]
    vempty = [MBarrier(f"vempty{s}", n_warps) for s in range(vs_slots)]
    meta = [None] * nmeta  # item number written there
    # per slot: the tile each copying warp's part holds (None: never written),
    # copies in flight, open reads
    # (with bulk one more part: the pages the bulk copies bring)
    nparts = kwarps + (1 if bulk else 0)
    kslot = [{"parts": [None] * nparts, "inflight": 0, "readers": 0} for _ in range(ks_slots)]
    vslot = [{"parts": [None] * nparts, "inflight": 0, "readers": 0} for _ in range(vs_slots)]
    engines = []  # per copying warp, FIFO of pending completions: (slot, part, tile) or ("arrive", barrier, n)
    bulks = []  # cp.async.bulk copies in flight, completing in any order: (slot, tile, barrier)

    def issue_bulk(t, slot, tile, bar, what):
        """thread 0 of a role's first warp: the barrier armed (its own arrival), then the bulk copy"""
        if not bulk or t != 0:
            return
        bar.arrive(1, expect_tx=1 if tile is not None else 0)
        if tile is not None:
            if slot["readers"]:
                raise Violation(f"bulk copy of {what} tile {tile} issued into a slot a wgmma still reads")
            slot["inflight"] += 1
            bulks.append((slot, tile, bar))

    def issue_copy(eng, slot, part, tile, what):
        if slot["readers"]:
            raise Violation(f"copy of {what} tile {tile} issued into a slot a wgmma still reads")
        slot["inflight"] += 1
        eng.append((slot, part, tile))

    def producer(role, t, eng):
        """role 0 all, 1 K and the meta slots, 2 V; t: the warp among its role's"""
        do_k, do_v = role != 2, role != 1
        tk, tv = (0 if n_tiles > 0 else None), None
        n = 0
        while True:
            ks = n % ks_slots
            if do_k:
                if n >= ks_slots:
                    yield from wait_phase(kempty[ks], n // ks_slots - (2 if bug == "parity" else 1))
                issue_bulk(t, kslot[ks], tk, kfull[ks], "K")
                if tk is not None:
                    issue_copy(eng, kslot[ks], t, tk, "K")
                eng.append(("arrive", kfull[ks], 32))  # the 32 lanes' noinc arrivals
                yield
                if t == 0:
                    meta[n % nmeta] = n  # lane 0: the entries (end marker when tk is None)
                    kfull[ks].arrive(1)
                yield
            if do_v and tv is not None:
                vn = n - 1
                vs = vn % vs_slots
                if vn >= vs_slots and bug != "vwait":
                    yield from wait_phase(vempty[vs], vn // vs_slots - 1)
                issue_bulk(t, vslot[vs], tv, vfull[vs], "V")
                issue_copy(eng, vslot[vs], t, tv, "V")
                eng.append(("arrive", vfull[vs], 32))
                yield
            if tk is None:
                while eng:  # cp.async.wait_all before the warp ends
                    yield
                return
            tv = tk
            tk = tk + 1 if tk + 1 < n_tiles else None
            n += 1

    seen = [[] for _ in range(n_warps)]

    def read_meta(slot_index, item, who):
        if meta[slot_index] != item:
            raise Violation(f"{who} read meta slot {slot_index} for item {item}, "
                            f"which holds item {meta[slot_index]}")
        return item < n_tiles  # a tile, not the end marker

    def open_read(slot, tile, what, who):
        if slot["inflight"]:
            raise Violation(f"{who}: wgmma reads {what} of tile {tile} while a copy into its slot is in flight")
        if any(p != tile for p in slot["parts"]):
            raise Violation(f"{who}: {what} slot holds tiles {slot['parts']} (a part each copying warp), "
                            f"expected {tile}")
        slot["readers"] += 1

    def first_scores(who):
        """Both consumers' start: the scores of item 0, its K slot given back;
        returns whether item 0 is a tile."""
        yield from wait_phase(kfull[0], 0)
        has = read_meta(0, 0, who)
        if has:
            open_read(kslot[0], 0, "K", who)
        yield  # the scores' wgmma in flight
        if has:
            kslot[0]["readers"] -= 1
            kempty[0].arrive()
        return has

    def next_k(j, who):
        """Both consumers' round j begins: K of item j + 1 waited for, its
        entries read; returns (its item n1, K slot, V slot of item j, whether
        item j + 1 is a tile)."""
        n1, ks, vs = j + 1, (j + 1) % ks_slots, j % vs_slots
        yield from wait_phase(kfull[ks], n1 // ks_slots)
        return n1, ks, vs, read_meta(n1 % nmeta, n1, who)

    def consumer(w):
        who = f"warp {w}"
        has = yield from first_scores(who)
        j = 0
        while has:
            n1, ks, vs, has_n = yield from next_k(j, who)
            if has_n:
                open_read(kslot[ks], n1, "K", who)
                if bug == "release":
                    kempty[ks].arrive()
            yield
            read_meta(j % nmeta, j, who)  # the mask of tile j
            yield from wait_phase(vfull[vs], j // vs_slots)
            open_read(vslot[vs], j, "V", who)
            seen[w].append(j)
            yield  # P V (and the scores of j + 1) in flight
            vslot[vs]["readers"] -= 1
            if has_n:
                kslot[ks]["readers"] -= 1
            vempty[vs].arrive()
            if has_n and bug != "release":
                kempty[ks].arrive()
            has = has_n
            j += 1

    nwg = n_warps // 4
    turns = [NamedBarrier(f"turn{g}", 8) for g in range(nwg)] if pingpong else []

    def consumer_pingpong(w):
        who, wg = f"warp {w}", w // 4
        has = yield from first_scores(who)
        if has:
            read_meta(0, 0, who)  # the mask of tile 0
            if wg == nwg - 1:
                turns[0].arrive()  # the first turn opened
        j = 0
        while has:
            n1, ks, vs, has_n = yield from next_k(j, who)
            if pp_early:
                yield from wait_phase(vfull[vs], j // vs_slots)  # V(j) before the turn
            joined = turns[wg].arrive()
            while turns[wg].completed <= joined:
                yield
            # the scores of j + 1; after the last tile of the end marker's slot (stale, unused)
            if has_n:
                open_read(kslot[ks], n1, "K", who)
            else:
                if kslot[ks]["inflight"]:
                    raise Violation(f"{who}: the end marker's K slot read while a copy into it is in flight")
                kslot[ks]["readers"] += 1
            if not pp_early:
                yield from wait_phase(vfull[vs], j // vs_slots)  # V(j) inside the turn
            open_read(vslot[vs], j, "V", who)
            seen[w].append(j)
            if has_n or wg != nwg - 1 or bug == "turn":
                turns[(wg + 1) % nwg].arrive()
            yield  # both products in flight
            kslot[ks]["readers"] -= 1  # wait_group 1: the scores done
            if has_n:
                kempty[ks].arrive()
                read_meta(n1 % nmeta, n1, who)  # the mask of tile j + 1
            yield  # P V in flight
            vslot[vs]["readers"] -= 1
            vempty[vs].arrive()
            has = has_n
            j += 1

    def step_engine(eng):
        head = eng.pop(0)
        if head[0] == "arrive":
            # an asynchronous arrival fires once every earlier copy of that warp has landed
            head[1].arrive(head[2])
        else:
            slot, part, tile = head
            slot["inflight"] -= 1
            slot["parts"][part] = tile

    actors = {}
    for pw in range(pwarps):
        eng = []
        engines.append(eng)
        actors[f"producer warp {pw}"] = producer(0 if pwarps == 1 else 1 if pw < kwarps else 2, pw % kwarps, eng)
    for w in range(n_warps):
        actors[f"warp {w}"] = consumer_pingpong(w) if pingpong else consumer(w)
    steps = 0
    while actors:
        steps += 1
        if steps > 400000:
            raise Violation("no end after 400000 steps: a deadlock (every actor waiting)")
        names = list(actors)
        pick = rng.random()
        busy = [e for e in engines if e]
        if pick < 0.3 and busy:
            step_engine(rng.choice(busy))
            continue
        if pick < 0.4 and bulks:
            slot, tile, bar = bulks.pop(rng.randrange(len(bulks)))
            slot["inflight"] -= 1
            slot["parts"][-1] = tile
            bar.complete_tx(1)
            continue
        name = rng.choice(names)
        try:
            next(actors[name])
        except StopIteration:
            del actors[name]
    if stats is not None:
        stats.append(steps)
    for w in range(n_warps):
        if seen[w] != list(range(n_tiles)):
            raise Violation(f"warp {w} consumed tiles {seen[w]}, expected 0..{n_tiles - 1}")
    if any(engines) or bulks:
        raise Violation("copies or arrivals still pending after every warp ended")
    for t in turns:
        if t.arrived:
            raise Violation(f"{t.name}: {t.arrived} warps arrived that no warp waits for")


def main(argv):
    runs = int(argv[1]) if len(argv) > 1 else 20
    # self-test: each deliberate error must be caught somewhere
    for bug in ("meta", "release", "vwait", "parity", "count", "turn", "bulk"):
        caught = False
        for seed in range(200):
            try:
                if bug == "bulk":
                    simulate(2, 1 + seed % 5, 12, random.Random(seed), bug, None, 4, True, 3, True, True)
                elif bug == "turn":
                    simulate(3, 1 + seed % 5, 8 + 4 * (seed % 2), random.Random(seed), bug, None, 4, True)
                else:
                    simulate(2 + seed % 2, 7, 1 + 3 * (seed % 3 == 0), random.Random(seed), bug, None,
                             4 if bug == "count" else (1, 2, 4)[seed % 3])
            except Violation:
                caught = True
                break
        if not caught:
            print(f"sim_prefill_producer: the deliberate error '{bug}' went unnoticed", file=sys.stderr)
            return 1
    cases, stats = 0, []
    for pwarps in (1, 2, 4):
        for ks_slots, vs_slots in ((2, 2), (3, 2), (4, 2), (2, 3)):
            for n_tiles in (0, 1, 2, 3, 4, 5, 7, 9):
                for n_warps in (1, 4, 12):
                    for seed in range(runs):
                        rng = random.Random(seed * 7919 + ks_slots * 131 + n_tiles * 17 + n_warps + pwarps * 99991
                                            + vs_slots * 7)
                        try:
                            simulate(ks_slots, n_tiles, n_warps, rng, None, stats, pwarps, False, vs_slots)
                        except Violation as e:
                            print(f"sim_prefill_producer: {pwarps} copying warps, K slots {ks_slots}, V slots "
                                  f"{vs_slots}, {n_tiles} tiles, {n_warps} warps, seed {seed}: {e}", file=sys.stderr)
                            return 1
                        cases += 1
    # the ping-pong consumers (LZ_NV_PINGPONG): 2 or 3 warpgroups taking turns, 2 or 3 V slots,
    # 1, 2 or 4 copying warps, V waited for before the turn (the default) or in it (LZ_NV_PP_EARLY 0)
    for pwarps, pp_early, bulk in ((1, True, False), (2, True, False), (4, True, False), (4, False, False),
                                   (4, True, True), (2, True, True)):
        for vs_slots in (2, 3):
            for ks_slots in (2, 3, 4):
                for n_tiles in (0, 1, 2, 3, 4, 5, 7, 9):
                    for n_warps in (8, 12):
                        for seed in range(runs):
                            rng = random.Random(seed * 104729 + ks_slots * 131 + n_tiles * 17 + n_warps
                                                + vs_slots * 7 + pwarps * 3 + pp_early + 5 * bulk)
                            try:
                                simulate(ks_slots, n_tiles, n_warps, rng, None, stats, pwarps, True, vs_slots,
                                         pp_early, bulk)
                            except Violation as e:
                                print(f"sim_prefill_producer: ping-pong, {pwarps} copying warps, K slots "
                                      f"{ks_slots}, V slots {vs_slots}, V waited {'before' if pp_early else 'in'} "
                                      f"the turn, bulk pages {bulk}, {n_tiles} tiles, {n_warps} warps, seed {seed}: {e}",
                                      file=sys.stderr)
                                return 1
                            cases += 1
    print(f"sim_prefill_producer: {cases} interleavings ({sum(stats)} steps; 1/2/4 copying warps, K slots "
          "2/3/4 with 2 V slots and 2 with 3, 0-9 tiles, 1/4/12 consumer warps, and 8/12 taking turns with 2/3 V "
          "slots, V waited before or in the turn, with and without bulk pages): no deadlock, no slot read while "
          "written or written while read, every tile seen in order, no turn left open; 7 deliberate protocol "
          "errors caught")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
