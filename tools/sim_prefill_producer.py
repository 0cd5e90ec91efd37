#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Replays the mbarrier protocol of the wgmma prefill's producer warp
(cl/prefill_nv.cl, LZ_NV_PRODUCER: lz_nv_produce and the consumer loop of
lz_prefill_nv_rows) under random interleavings, on the host.

Actors: the producer warp, W consumer warps, and the copy engine, which lands
the producer's cp.async copies in order at random later times and then makes
their asynchronous mbarrier arrivals (cp.async.mbarrier.arrive.noinc). The
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

    def arrive(self, n=1):
        self.pending -= n
        if self.pending < 0:
            raise Violation(f"{self.name}: more arrivals than its count in phase {self.completed}")
        if self.pending == 0:
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


def simulate(ks_slots, n_tiles, n_warps, rng, bug=None, stats=None):
    """bug: a deliberate error in the protocol, which the checks must catch
    (main's self-test): "meta" one meta slot too few, "release" the K slot
    given back before its scores are waited for, "vwait" V refilled without
    waiting for its slot, "parity" the producer's empty-wait one phase off."""
    vs_slots = 2
    nmeta = ks_slots + (0 if bug == "meta" else 1)
    kfull = [MBarrier(f"kfull{s}", 33) for s in range(ks_slots)]
    kempty = [MBarrier(f"kempty{s}", n_warps) for s in range(ks_slots)]
    vfull = [MBarrier(f"vfull{s}", 32) for s in range(vs_slots)]
    vempty = [MBarrier(f"vempty{s}", n_warps) for s in range(vs_slots)]
    meta = [None] * nmeta  # item number written there
    # per slot: the tile it holds (None: never written), copies in flight, open reads
    kslot = [{"tile": None, "inflight": 0, "readers": 0} for _ in range(ks_slots)]
    vslot = [{"tile": None, "inflight": 0, "readers": 0} for _ in range(vs_slots)]
    engine = []  # FIFO of pending completions: (slot dict, tile, barrier or None, arrivals)

    def issue_copy(slot, tile, what):
        if slot["readers"]:
            raise Violation(f"copy of {what} tile {tile} issued into a slot a wgmma still reads")
        slot["inflight"] += 1
        engine.append((slot, tile))

    def producer():
        tk, tv = (0 if n_tiles > 0 else None), None
        n = 0
        while True:
            ks = n % ks_slots
            if n >= ks_slots:
                phase = n // ks_slots - (2 if bug == "parity" else 1)
                while not kempty[ks].ready(phase & 1, phase):
                    yield
            if tk is not None:
                issue_copy(kslot[ks], tk, "K")
            engine.append(("arrive", kfull[ks], 32))  # the 32 lanes' noinc arrivals
            yield
            meta[n % nmeta] = n  # lane 0: the entries (end marker when tk is None)
            kfull[ks].arrive(1)
            yield
            if tv is not None:
                vn = n - 1
                vs = vn % vs_slots
                if vn >= 2 and bug != "vwait":
                    phase = vn // 2 - 1
                    while not vempty[vs].ready(phase & 1, phase):
                        yield
                issue_copy(vslot[vs], tv, "V")
                engine.append(("arrive", vfull[vs], 32))
                yield
            if tk is None:
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
        if slot["tile"] != tile:
            raise Violation(f"{who}: {what} slot holds tile {slot['tile']}, expected {tile}")
        slot["readers"] += 1

    def consumer(w):
        who = f"warp {w}"
        while not kfull[0].ready(0, 0):
            yield
        has = read_meta(0, 0, who)
        if has:
            open_read(kslot[0], 0, "K", who)
        yield  # the scores' wgmma in flight
        if has:
            kslot[0]["readers"] -= 1
            kempty[0].arrive()
        j = 0
        while has:
            n1, ks, vs = j + 1, (j + 1) % ks_slots, j % vs_slots
            phase = n1 // ks_slots
            while not kfull[ks].ready(phase & 1, phase):
                yield
            has_n = read_meta(n1 % nmeta, n1, who)
            if has_n:
                open_read(kslot[ks], n1, "K", who)
                if bug == "release":
                    kempty[ks].arrive()
            yield
            read_meta(j % nmeta, j, who)  # the mask of tile j
            phase = j // 2
            while not vfull[vs].ready(phase & 1, phase):
                yield
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

    def copy_engine():
        while True:
            if not engine:
                yield "idle"
                continue
            head = engine[0]
            if head[0] == "arrive":
                # an asynchronous arrival fires once every earlier copy has landed
                engine.pop(0)
                head[1].arrive(head[2])
            else:
                slot, tile = engine.pop(0)
                slot["inflight"] -= 1
                slot["tile"] = tile
            yield "work"

    actors = {"producer": producer()}
    for w in range(n_warps):
        actors[f"warp {w}"] = consumer(w)
    eng = copy_engine()
    steps = 0
    while actors:
        steps += 1
        if steps > 200000:
            raise Violation("no end after 200000 steps: a deadlock (every actor waiting)")
        names = list(actors)
        pick = rng.random()
        if pick < 0.3 and engine:
            next(eng)
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
    if engine:
        raise Violation("copies or arrivals still pending after every warp ended")


def main(argv):
    runs = int(argv[1]) if len(argv) > 1 else 40
    # self-test: each deliberate error must be caught somewhere
    for bug in ("meta", "release", "vwait", "parity"):
        caught = False
        for seed in range(200):
            try:
                simulate(2 + seed % 2, 7, 1 + 3 * (seed % 3 == 0), random.Random(seed), bug)
            except Violation:
                caught = True
                break
        if not caught:
            print(f"sim_prefill_producer: the deliberate error '{bug}' went unnoticed", file=sys.stderr)
            return 1
    cases, stats = 0, []
    for ks_slots in (2, 3, 4):
        for n_tiles in (0, 1, 2, 3, 4, 5, 7, 9):
            for n_warps in (1, 4, 12):
                for seed in range(runs):
                    rng = random.Random(seed * 7919 + ks_slots * 131 + n_tiles * 17 + n_warps)
                    try:
                        simulate(ks_slots, n_tiles, n_warps, rng, None, stats)
                    except Violation as e:
                        print(f"sim_prefill_producer: K slots {ks_slots}, {n_tiles} tiles, {n_warps} warps, "
                              f"seed {seed}: {e}", file=sys.stderr)
                        return 1
                    cases += 1
    print(f"sim_prefill_producer: {cases} interleavings ({sum(stats)} steps; K slots 2/3/4, 0-9 tiles, "
          "1/4/12 consumer warps): no deadlock, no slot read while written or written while read, every "
          "tile seen in order; 4 deliberate protocol errors caught")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
