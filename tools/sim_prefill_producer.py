#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Replays the mbarrier protocol of the wgmma prefill's producer
(cl/nv/prefill_producer.h, LZ_NV_PRODUCER: lz_nv_produce, lz_nv_consume and the
consumer loop of lz_prefill_nv_rows; with LZ_NV_PERSIST lz_nv_produce_tasks
and lz_prefill_nv_persist) under random interleavings, on the host.

Actors: the producer's copying warps (LZ_NV_PWARPS 1, 2 or 4: one doing all,
or K + entries and V, or two of each with half of every tile's copies each),
W consumer warps, and one copy engine per copying warp, which lands that
warp's cp.async copies in order at random later times and then makes their
asynchronous mbarrier arrivals (cp.async.mbarrier.arrive.noinc). The
mbarriers follow PTX: a count of arrivals a phase, and a wait for the phase
of a parity, which succeeds once that phase has completed (so a waiter must
never be two phases behind, nor wait for a phase before the one before it
has completed: both checked). The named barriers of the ping-pong's turns
count warps (8 a phase: a warpgroup's bar.sync and the one before's
bar.arrive).

Modes: one task a work-group (without the ping-pong: 1, 4 or 12 consumer
warps, the end marker's K slot not given back; with it: 8 or 12, i.e. 2 or 3
warpgroups taking turns, lz_nv_consume from items 0, every K item given
back, the end marker's too), and the persistent work-group (LZ_NV_PERSIST,
ping-pong only): a list of 1-4 tasks of 0-6 tiles each, the K ring's items
numbered on across them (each task's tiles, its end marker, then after the
last task a stop marker that is never given back), the V ring's by tiles
only, each task's descriptor in tasks[n % NMETA] beside the meta of its
first item, the consumers' task loop (wait for the first item, stop or read
the descriptor, then lz_nv_consume from there, which waits for that item
again) and the turns opened and closed per task.

For every interleaving tried, checks:
  - no deadlock (every actor waiting, nothing in flight); every consumer
    sees every task's visible tiles, in order, then the end (and the stop);
  - a consumer reads a meta slot only when it holds the item it expects
    (written before the arrival, not yet overwritten), and a task's
    descriptor only when it is that task's;
  - no wgmma reads a K or V slot while a copy into it is in flight, and no
    copy is issued into a slot that a wgmma may still read;
  - each read slot holds the tile expected;
  - every K item but the stop and every V tile given back by every warp at
    the end (none twice);
  - every phase of a turn joins one round's warps (a warpgroup's and the
    hand-on of the one before, of the same task), and no turn is left open.
Main also makes sure that each of a list of deliberate protocol errors is
caught. Exits 1 on the first violation, printing the configuration and seed.
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
    """bar.sync / bar.arrive of `count` warps a phase (the turns of LZ_NV_PINGPONG).
    Each arrival carries the round it means (task, round of the warpgroup
    whose turn it is); a phase joining different rounds is a violation."""

    def __init__(self, name, count):
        self.name, self.count, self.arrived, self.completed = name, count, 0, 0
        self.rounds = []

    def arrive(self, rnd=None):
        """One warp's arrival; returns the phase it joined."""
        phase = self.completed
        self.arrived += 1
        self.rounds.append(rnd)
        if self.arrived == self.count:
            if len(set(self.rounds)) != 1:
                raise Violation(f"{self.name}: phase {phase} joins the warps of different rounds "
                                f"(task, round) {sorted(set(self.rounds))}")
            self.arrived, self.completed, self.rounds = 0, self.completed + 1, []
        return phase


def wait_phase(bar, phase):
    """An mbarrier.try_wait.parity loop for that phase (a step each failed
    try; the first in the step of what the actor did before, the later ones
    pure waits, "wait")."""
    if not bar.ready(phase & 1, phase):
        yield
        while not bar.ready(phase & 1, phase):
            yield "wait"


def simulate(ks_slots, tasks, n_warps, rng, bug=None, stats=None, pwarps=1, pingpong=False, vs_slots=2,
             pp_early=True, bulk=False, persist=False):
    """tasks: the visible tiles of each task (a number: one task); persist:
    the persistent work-group (LZ_NV_PERSIST, with pingpong), its tasks then
    followed by the stop marker; else one task (one entry in tasks).
    bug: a deliberate error in the protocol, which the checks must catch
    (main's self-test): "meta" one meta slot too few, "release" the K slot
    given back before its scores are waited for, "vwait" V refilled without
    waiting for its slot, "parity" the producer's empty-wait one phase off,
    "count" a K full barrier counting one copying warp too few, "turn" the
    last warpgroup handing on the turn after the last round (pingpong),
    "bulk" the bulk copies' arming arrival not counted; the persistent
    work-group's: "endback" no end marker's K slot given back (as before the
    persistent kernel), "emptyback" that of a task without tiles (its first
    item) not given back, "vitem" the V ring numbered by the K ring's items
    instead of by tiles, "taskafter" the task's descriptor written after the
    arrival on K full, "nostop" no stop marker after the last task,
    "turnopen" the first turn opened also for a task without tiles.
    pingpong: the consumers of LZ_NV_PINGPONG (warpgroups of 4 warps taking
    turns through named barriers of 8 warps); vs_slots: V slots
    (LZ_NV_PVSLOTS); pp_early: the ping-pong waits for V before its turn
    (LZ_NV_PP_EARLY 1) or inside it, after issuing the scores (0); bulk: a
    tiled pool's full pages (LZ_NV_BULK), one cp.async.bulk a slot by thread
    0 of the role's first warp, which arms the full barrier first with an
    arrival of its own (the count one higher; bug "bulk" leaves it out)."""
    if isinstance(tasks, int):
        tasks = [tasks]
    tasks = list(tasks)
    assert persist or len(tasks) == 1
    assert pingpong or not persist
    kwarps = 1 if pwarps == 1 else pwarps // 2  # copying warps a role (LZ_NV_KWARPS)
    nmeta = ks_slots + (0 if bug == "meta" else 1)
    nbulk = 1 if bulk and bug != "bulk" else 0
    kcount = 32 * (kwarps - (1 if bug == "count" else 0)) + 1 + nbulk
    kfull = [MBarrier(f"kfull{s}", kcount) for s in range(ks_slots)]
    kempty = [MBarrier(f"kempty{s}", n_warps) for s in range(ks_slots)]
    vfull = [MBarrier(f"vfull{s}", 32 * kwarps + nbulk) for s in range(vs_slots)]
    vempty = [MBarrier(f"vempty{s}", n_warps) for s in range(vs_slots)]
    # The K ring's items in order: (task, tile) of a visible tile, (task, None)
    # a task's end marker (meta tile -1), (None, None) the stop (meta tile -2)
    items = []
    for k, n_tiles in enumerate(tasks):
        items += [(k, i) for i in range(n_tiles)] + [(k, None)]
    if persist and bug != "nostop":
        items.append((None, None))
    meta = [None] * nmeta  # item number written there
    task_slot = [None] * nmeta  # the task (its index) written there with its first item
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
        """role 0 all, 1 K and the meta slots, 2 V; t: the warp among its role's.
        lz_nv_produce once (one task) or per task and for the stop
        (lz_nv_produce_tasks), n and v running on across them"""
        do_k, do_v = role != 2, role != 1
        n = v = 0
        for k in range(len(tasks) + (1 if persist and bug != "nostop" else 0)):
            n_tiles = tasks[k] if k < len(tasks) else 0  # the stop: a task without tiles
            first = n
            tk, tv = (0 if n_tiles > 0 else None), None
            while True:
                ks = n % ks_slots
                if do_k:
                    if n >= ks_slots:
                        yield from wait_phase(kempty[ks], n // ks_slots - (2 if bug == "parity" else 1))
                    issue_bulk(t, kslot[ks], None if tk is None else (k, tk), kfull[ks], "K")
                    if tk is not None:
                        issue_copy(eng, kslot[ks], t, (k, tk), "K")
                    eng.append(("arrive", kfull[ks], 32))  # the 32 lanes' noinc arrivals
                    yield
                    if t == 0:
                        meta[n % nmeta] = n  # lane 0: the entries (end or stop marker when tk is None)
                        if persist and n == first and bug != "taskafter":
                            task_slot[n % nmeta] = k  # the task's first item: its descriptor
                        kfull[ks].arrive(1)
                        if persist and n == first and bug == "taskafter":
                            yield
                            task_slot[n % nmeta] = k
                    yield
                if do_v and tv is not None:
                    vn = n - 1 if bug == "vitem" else v  # V of the item before (the v-th tile)
                    vs = vn % vs_slots
                    if vn >= vs_slots and bug != "vwait":
                        yield from wait_phase(vempty[vs], vn // vs_slots - 1)
                    issue_bulk(t, vslot[vs], (k, tv), vfull[vs], "V")
                    issue_copy(eng, vslot[vs], t, (k, tv), "V")
                    eng.append(("arrive", vfull[vs], 32))
                    v += 1
                    yield
                if tk is None:
                    break
                tv = tk
                tk = tk + 1 if tk + 1 < n_tiles else None
                n += 1
            n += 1
        while eng:  # cp.async.wait_all before the warp ends
            yield "wait"

    seen = [[] for _ in range(n_warps)]
    stopped = [False] * n_warps

    def read_meta(slot_index, item, who):
        """the entries of item `item`; returns (task, tile) as items"""
        if meta[slot_index] != item:
            raise Violation(f"{who} read meta slot {slot_index} for item {item}, "
                            f"which holds item {meta[slot_index]}")
        return items[item]

    def open_read(slot, tile, what, who):
        if slot["inflight"]:
            raise Violation(f"{who}: wgmma reads {what} of tile {tile} while a copy into its slot is in flight")
        if any(p != tile for p in slot["parts"]):
            raise Violation(f"{who}: {what} slot holds tiles {slot['parts']} (a part each copying warp), "
                            f"expected {tile}")
        slot["readers"] += 1

    def first_scores(k0, who):
        """A consumer's start of a task: the scores of item k0, its K slot
        given back (without the ping-pong only a tile's); returns whether
        item k0 is a tile."""
        ks = k0 % ks_slots
        yield from wait_phase(kfull[ks], k0 // ks_slots)
        has = read_meta(k0 % nmeta, k0, who)[1] is not None
        if has:
            open_read(kslot[ks], items[k0], "K", who)
        yield  # the scores' wgmma in flight
        if has:
            kslot[ks]["readers"] -= 1
        if has or (pingpong and bug != "endback" and not (bug == "emptyback" and persist)):
            kempty[ks].arrive()  # lz_nv_consume: "an end marker's too"
        return has

    def next_k(k0, v0, j, who):
        """Round j of a task from item k0, V tile v0 begins: K of item
        k0 + j + 1 waited for, its entries read; returns (n1, K slot, V tile
        index of tile j, its V slot, whether item n1 is a tile)."""
        n1 = k0 + j + 1
        vj = k0 + j if bug == "vitem" else v0 + j
        ks, vs = n1 % ks_slots, vj % vs_slots
        yield from wait_phase(kfull[ks], n1 // ks_slots)
        return n1, ks, vj, vs, read_meta(n1 % nmeta, n1, who)[1] is not None

    def consumer(w):
        """one task without the ping-pong (lz_prefill_nv_rows)"""
        who = f"warp {w}"
        has = yield from first_scores(0, who)
        j = 0
        while has:
            n1, ks, vj, vs, has_n = yield from next_k(0, 0, j, who)
            if has_n:
                open_read(kslot[ks], items[n1], "K", who)
                if bug == "release":
                    kempty[ks].arrive()
            yield
            read_meta(j % nmeta, j, who)  # the mask of tile j
            yield from wait_phase(vfull[vs], vj // vs_slots)
            open_read(vslot[vs], items[j], "V", who)
            seen[w].append(items[j])
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

    def take_turn(wg, rnd):
        joined = turns[wg].arrive(rnd)
        yield
        while turns[wg].completed <= joined:
            yield "wait"

    def consume(w, k, k0, v0):
        """lz_nv_consume: warp w's part of task k, its items from k0, its
        tiles' V from v0; returns the two counters past them"""
        who, wg = f"warp {w}", w // 4
        has = yield from first_scores(k0, who)
        if has or bug == "turnopen":
            if wg == nwg - 1:
                turns[0].arrive((k, 0))  # the first turn opened
        if has:
            read_meta(k0 % nmeta, k0, who)  # the mask of the first tile
        j = 0
        while has:
            n1, ks, vj, vs, has_n = yield from next_k(k0, v0, j, who)
            if pp_early:
                yield from wait_phase(vfull[vs], vj // vs_slots)  # V(j) before the turn
            yield from take_turn(wg, (k, j))
            # the scores of j + 1 (its entries read again); after the last tile
            # of the end marker's slot (stale, unused)
            read_meta(n1 % nmeta, n1, who)
            if has_n:
                open_read(kslot[ks], items[n1], "K", who)
            else:
                if kslot[ks]["inflight"]:
                    raise Violation(f"{who}: the end marker's K slot read while a copy into it is in flight")
                kslot[ks]["readers"] += 1
            if not pp_early:
                yield from wait_phase(vfull[vs], vj // vs_slots)  # V(j) inside the turn
            open_read(vslot[vs], items[k0 + j], "V", who)
            seen[w].append(items[k0 + j])
            if has_n or wg != nwg - 1 or bug == "turn":
                # the next warpgroup's turn of this round (the first's: of the next round)
                turns[(wg + 1) % nwg].arrive((k, j + (wg == nwg - 1)))
            yield  # both products in flight
            kslot[ks]["readers"] -= 1  # wait_group 1: the scores done
            if has_n or bug != "endback":
                kempty[ks].arrive()  # an end marker's too
            if has_n:
                read_meta(n1 % nmeta, n1, who)  # the mask of tile j + 1
            yield  # P V in flight
            vslot[vs]["readers"] -= 1
            vempty[vs].arrive()
            has = has_n
            j += 1
        return k0 + j + 1, v0 + j

    def consumer_pingpong(w):
        """lz_prefill_nv_rows (one task from items 0) or the task loop of
        lz_prefill_nv_persist"""
        who = f"warp {w}"
        if not persist:
            yield from consume(w, 0, 0, 0)
            return
        kn = vn = 0
        for k in range(len(tasks) + 1):
            yield from wait_phase(kfull[kn % ks_slots], kn // ks_slots)
            if read_meta(kn % nmeta, kn, who) == (None, None):
                stopped[w] = True  # the stop: its slot never given back
                return
            if task_slot[kn % nmeta] != k:
                raise Violation(f"{who} read the descriptor of task {task_slot[kn % nmeta]} "
                                f"in tasks[{kn % nmeta}] for task {k} (item {kn})")
            yield
            kn, vn = yield from consume(w, k, kn, vn)
        raise Violation(f"{who}: no stop after the last task")

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
    waiting = set()  # actors whose last step was a pure wait, since the last change of state
    while actors:
        steps += 1
        if steps > 400000:
            raise Violation("no end after 400000 steps: a livelock")
        pick = rng.random()
        busy = [e for e in engines if e]
        if pick < 0.3 and busy:
            step_engine(rng.choice(busy))
            waiting.clear()
            continue
        if pick < 0.4 and bulks:
            slot, tile, bar = bulks.pop(rng.randrange(len(bulks)))
            slot["inflight"] -= 1
            slot["parts"][-1] = tile
            bar.complete_tx(1)
            waiting.clear()
            continue
        name = rng.choice(list(actors))
        try:
            what = next(actors[name])
        except StopIteration:
            del actors[name]
            waiting.clear()
            continue
        if what != "wait":
            waiting.clear()
            continue
        waiting.add(name)
        if len(waiting) == len(actors) and not busy and not bulks:
            raise Violation(f"deadlock: {', '.join(sorted(actors))} all waiting, nothing in flight")
    if stats is not None:
        stats.append(steps)
    tiles = [it for it in items if it[1] is not None]
    for w in range(n_warps):
        if seen[w] != tiles:
            raise Violation(f"warp {w} consumed tiles (task, tile) {seen[w]}, expected {tiles}")
        if persist and not stopped[w]:
            raise Violation(f"warp {w} never saw the stop")
    if any(engines) or bulks:
        raise Violation("copies or arrivals still pending after every warp ended")
    for t in turns:
        if t.arrived:
            raise Violation(f"{t.name}: {t.arrived} warps arrived that no warp waits for")
    # every K item given back by every warp (the stop not; without the
    # ping-pong not the end marker), every V tile
    k_back = len(items) - (1 if persist else 0 if pingpong else 1)
    if sum(b.completed for b in kempty) != k_back or any(b.pending != n_warps for b in kempty):
        raise Violation(f"K slots given back {[b.completed for b in kempty]} times (and "
                        f"{[n_warps - b.pending for b in kempty]} warps of a next), expected {k_back} items")
    if sum(b.completed for b in vempty) != len(tiles) or any(b.pending != n_warps for b in vempty):
        raise Violation(f"V slots given back {[b.completed for b in vempty]} times, expected {len(tiles)} tiles")


# the persistent work-group's task lists (tiles a task) tried for every
# configuration before random ones: tasks without tiles first, last, in
# the middle and alone, a stop right after the first task
PERSIST_LISTS = ([0], [1], [5], [0, 0], [0, 3], [3, 0], [2, 0, 2], [0, 0, 0, 0], [1, 1, 1, 1],
                 [6, 0, 0, 6], [0, 4, 0, 1], [2, 5, 3], [6, 6])


PERSIST_RUNS = 8  # the persistent work-group's runs a configuration, per one of RUNS_PER_CONFIG


def persist_list(seed, rng):
    if seed < len(PERSIST_LISTS):
        return PERSIST_LISTS[seed]
    return [rng.choice((0, 0, 1, 2, 3, 4, 5, 6)) for _ in range(rng.randint(1, 4))]


def main(argv):
    runs = int(argv[1]) if len(argv) > 1 else 20
    # self-test: each deliberate error must be caught somewhere
    persist_bugs = ("endback", "emptyback", "vitem", "taskafter", "nostop", "turnopen")
    # for some, the kind of violation that must be found (not only the count of slots given back at the end)
    must = {"endback": "deadlock", "emptyback": "deadlock", "nostop": "deadlock"}
    for bug in ("meta", "release", "vwait", "parity", "count", "turn", "bulk") + persist_bugs:
        caught = False
        for seed in range(200):
            try:
                if bug == "bulk":
                    simulate(2, 1 + seed % 5, 12, random.Random(seed), bug, None, 4, True, 3, True, True)
                elif bug == "turn":
                    simulate(3, 1 + seed % 5, 8 + 4 * (seed % 2), random.Random(seed), bug, None, 4, True)
                elif bug in persist_bugs:
                    rng = random.Random(seed)
                    simulate(2 + seed % 2, persist_list(seed, rng), 8 + 4 * (seed % 2), rng, bug, None,
                             (1, 2, 4)[seed % 3], True, 2 + seed % 2, True, seed % 4 == 3, True)
                else:
                    simulate(2 + seed % 2, 7, 1 + 3 * (seed % 3 == 0), random.Random(seed), bug, None,
                             4 if bug == "count" else (1, 2, 4)[seed % 3])
            except Violation as e:
                if must.get(bug, "") in str(e):
                    caught = True
                    break
        if not caught:
            print(f"sim_prefill_producer: the deliberate error '{bug}' went unnoticed"
                  + (f" (no {must[bug]})" if bug in must else ""), file=sys.stderr)
            return 1
    n_bugs = 7 + len(persist_bugs)
    cases, pcases, stats = 0, 0, []
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
    # 1, 2 or 4 copying warps, V waited for before the turn (the default) or in it (LZ_NV_PP_EARLY 0);
    # one task, then the persistent work-group's lists of tasks (LZ_NV_PERSIST)
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
                for n_warps in (8, 12):
                    for seed in range(PERSIST_RUNS * runs):
                        rng = random.Random(seed * 15485863 + ks_slots * 131 + n_warps + vs_slots * 7
                                            + pwarps * 3 + pp_early + 5 * bulk)
                        task_list = persist_list(seed, rng)
                        try:
                            simulate(ks_slots, task_list, n_warps, rng, None, stats, pwarps, True, vs_slots,
                                     pp_early, bulk, True)
                        except Violation as e:
                            print(f"sim_prefill_producer: persistent, {pwarps} copying warps, K slots "
                                  f"{ks_slots}, V slots {vs_slots}, V waited {'before' if pp_early else 'in'} "
                                  f"the turn, bulk pages {bulk}, tasks of {task_list} tiles, {n_warps} warps, "
                                  f"seed {seed}: {e}", file=sys.stderr)
                            return 1
                        pcases += 1
    print(f"sim_prefill_producer: {cases + pcases} interleavings ({sum(stats)} steps; 1/2/4 copying warps, K slots "
          "2/3/4 with 2 V slots and 2 with 3, 0-9 tiles, 1/4/12 consumer warps, and 8/12 taking turns with 2/3 V "
          "slots, V waited before or in the turn, with and without bulk pages; of them "
          f"{pcases} persistent, turns as those, K slots 2/3/4, V slots 2/3, lists of 1-4 tasks of 0-6 tiles then the "
          "stop): no deadlock, no slot read while "
          "written or written while read, every task's tiles seen in order, each descriptor the right task's, "
          f"every slot given back, no turn mixing rounds or left open; {n_bugs} deliberate protocol errors caught")
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv))
