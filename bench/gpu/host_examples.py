"""Issue 13's device check of the host-probe examples: reads what host_examples.sh wrote
for attach/tests/apps/known_calls.cu (whose every allocation, copy, launch,
synchronisation and error is known) and checks every count, exactly:
- api_errors, cumem_leak, memcpy_bw, sync_stalls and launch_profile, run together in one
  `trace --json` (their final maps);
- the `--timeline` of the same run: host calls by name, copy spans by direction and size,
  kernel spans, one flow per launch, and no kernel starting before its launch call.
Prints PASS/FAIL per check, writes OUT/host_examples.json, exits 1 on a failure.
    python3 bench/gpu/host_examples.py OUT"""
import collections
import json
import os
import statistics
import sys

out = sys.argv[1]
results, failed = [], []


def check(name, ok, **kw):
    results.append({"check": name, "ok": bool(ok), **kw})
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else "  " + json.dumps(kw)[:1500]), flush=True)
    if not ok:
        failed.append(name)


def word(h):
    """A little-endian hex string as an integer."""
    return int.from_bytes(bytes.fromhex(h), "little")


events = []
with open(os.path.join(out, "host_examples.out"), errors="replace") as f:
    app = []
    for line in f:
        try:
            events.append(json.loads(line))
        except ValueError:
            app.append(line.strip())
final = {e["map"]: e for e in events if e.get("event") == "map" and e.get("final")}


def printed(m):
    return {p["key"]: p["value"][0] for p in final.get(m, {}).get("printed", [])}


def slots(m):
    """An array map's non-zero slots, {index: count}."""
    return {word(k): word(v) for k, v in final.get(m, {}).get("entries", []) if word(v)}


check("the app ran and its result is right", "known_calls ok" in app, app=app)
check("every example's maps were printed at exit",
      all(m in final for m in ["api_errors:errors", "cumem_leak:outstanding_bytes", "memcpy_bw:htod_bytes_hist",
                               "sync_stalls:calls", "launch_profile:launch_calls"]), maps=sorted(final))

# api_errors: the one failing call.
errs = printed("api_errors:errors")
check("api_errors: exactly one error, cuMemFree_v2 returning 1", errs == {"cuMemFree_v2, 1": 1}, errors=errs)

# cumem_leak: two leaking stacks, by the function that allocated.
by = printed("cumem_leak:outstanding_bytes")
n = printed("cumem_leak:outstanding_allocs")
def frame(stacks, fn):
    return {k: v for k, v in stacks.items() if f", {fn}+0x" in k or k.startswith(fn + "+0x")}
check("cumem_leak: 2,097,152 bytes in 2 allocations from keep_buffers",
      list(frame(by, "keep_buffers").values()) == [2 << 20] and list(frame(n, "keep_buffers").values()) == [2], bytes=by, allocs=n)
check("cumem_leak: 4,000 bytes in 1 allocation from keep_table",
      list(frame(by, "keep_table").values()) == [4000] and list(frame(n, "keep_table").values()) == [1])
check("cumem_leak: no other stack leaks", len(by) == 2 and len(n) == 2, stacks=list(by))
live = printed("cumem_leak:allocs")
check("cumem_leak: 3 allocations live at exit", len(final.get("cumem_leak:allocs", {}).get("printed", [])) == 3, allocs=live)

# memcpy_bw: sizes as log2 slots (4 KiB -> 12, 4 MiB -> 22, 256 B -> 8); MB/s split at 1 MiB.
total = lambda m: sum(slots(m).values())
check("memcpy_bw: host->device sizes 3 x 4096 B, 2 x 4 MiB", slots("memcpy_bw:htod_bytes_hist") == {12: 3, 22: 2},
      got=slots("memcpy_bw:htod_bytes_hist"))
check("memcpy_bw: device->host sizes 2 x 256 B, 1 x 4 MiB", slots("memcpy_bw:dtoh_bytes_hist") == {8: 2, 22: 1},
      got=slots("memcpy_bw:dtoh_bytes_hist"))
check("memcpy_bw: bandwidth samples 3 small + 2 large host->device, 2 small + 1 large device->host",
      [total("memcpy_bw:" + h) for h in ("htod_mbps_small_hist", "htod_mbps_large_hist", "dtoh_mbps_small_hist",
                                         "dtoh_mbps_large_hist")] == [3, 2, 2, 1])
mbps = {h: slots("memcpy_bw:" + h) for h in ("htod_mbps_large_hist", "dtoh_mbps_large_hist")}
# 4 MiB pageable copies on a PCIe 5 host: between 1 and 64 GB/s, i.e. slots 9..15 of MB/s.
check("memcpy_bw: the 4 MiB copies ran at 0.5-64 GB/s", all(9 <= s <= 15 for h in mbps.values() for s in h), mbps=mbps)

# sync_stalls: calls per function (0 stream, 1 context, 2 event).
calls = slots("sync_stalls:calls")
check("sync_stalls: 5 stream, 3 context and 2 event synchronisations", calls == {0: 5, 1: 3, 2: 2}, calls=calls)
check("sync_stalls: 10 waits in the histogram", total("sync_stalls:stall_us_hist") == 10,
      hist=slots("sync_stalls:stall_us_hist"))
stall = slots("sync_stalls:stall_ns")
check("sync_stalls: the stream waits took time (the kernels ran behind them)", stall.get(0, 0) > 0, stall_ns=stall)

# launch_profile: 40 launch calls; per kernel on the GPU.
lp = {k: printed("launch_profile:" + k) for k in ("launch_calls", "launches", "queue_ns_total", "run_ns_total")}
check("launch_profile: 40 launch calls on the host", sum(lp["launch_calls"].values()) == 40, got=lp["launch_calls"])
check("launch_profile: 30 launches of scale and 10 of shift on the GPU", lp["launches"] == {"scale": 30, "shift": 10},
      got=lp["launches"])
check("launch_profile: queue delay and run time measured for both kernels",
      all(lp[m].get(k, 0) > 0 for m in ("queue_ns_total", "run_ns_total") for k in ("scale", "shift")), got=lp)
for k in ("scale", "shift"):
    c = lp["launches"].get(k)
    if c:
        print(f"   {k}: mean queue delay {lp['queue_ns_total'].get(k, 0) / c / 1000:.1f} us, "
              f"mean run {lp['run_ns_total'].get(k, 0) / c / 1000:.1f} us", flush=True)

# The timeline of the same run.
doc = json.load(open(os.path.join(out, "known_calls_timeline.json")))
evs = doc["traceEvents"]
host = collections.Counter(e["name"] for e in evs if e.get("ph") == "X" and e.get("cat") in ("api", "copy", "launch"))
want = {"cuMemAlloc_v2": 7, "cuMemFree_v2": 5, "cuMemcpyHtoD_v2": 5, "cuMemcpyDtoH_v2": 3, "cuLaunchKernel": 40,
        "cuStreamSynchronize": 5, "cuEventSynchronize": 2, "cuCtxSynchronize": 3}
check("timeline: host calls by name", all(host.get(k) == v for k, v in want.items()), want=want,
      got={k: host.get(k) for k in want}, other=sorted(set(host) - set(want)))
copies = collections.Counter((e["args"]["direction"], e["args"]["bytes"]) for e in evs
                             if e.get("ph") == "X" and e.get("cat") == "copy")
wc = {("HtoD", 4 << 20): 2, ("HtoD", 4096): 3, ("DtoH", 4 << 20): 1, ("DtoH", 256): 2}
check("timeline: copy spans by direction and size", dict(copies) == wc,
      got={f"{d} {b}": c for (d, b), c in copies.items()})
kernels = collections.Counter(e["name"] for e in evs if e.get("cat") == "kernel")
check("timeline: 30 scale and 10 shift kernel spans measured on the GPU", dict(kernels) == {"scale": 30, "shift": 10},
      got=dict(kernels))
s = {e["id"]: e for e in evs if e.get("ph") == "s"}
f = {e["id"]: e for e in evs if e.get("ph") == "f"}
gaps = sorted(f[i]["ts"] - s[i]["ts"] for i in s if i in f)
cals = doc.get("otherData", {}).get("calibrations", [])
unc = max([c["uncertainty_ns"] for c in cals] or [0]) / 1000.0
early = [g for g in gaps if g < -unc]
check("timeline: a flow from each of the 40 launches to its kernel, none starting before its call",
      len(gaps) == 40 and not early, flows=len(gaps), early=len(early), min_gap_us=gaps[0] if gaps else None,
      max_uncertainty_us=unc, calibrations=len(cals))
# The app queues four kernels at a time on its stream, so most wait behind the one before;
# the launch -> start gap is the queue delay only where the stream was idle at the call
# (its previous kernel had ended).
spans = sorted((e for e in evs if e.get("cat") == "kernel"), key=lambda e: e["ts"])
idle_gaps, prev_end = [], {}
for k in spans:
    c = k["args"].get("correlation_id")
    if c in s and c in f and prev_end.get(k["tid"], float("-inf")) <= s[c]["ts"]:
        idle_gaps.append(f[c]["ts"] - s[c]["ts"])
    prev_end[k["tid"]] = max(prev_end.get(k["tid"], float("-inf")), k["ts"] + k["dur"])
idle_gaps.sort()
med_all = statistics.median(gaps) if gaps else None
med = statistics.median(idle_gaps) if idle_gaps else None
check("timeline: launches onto an idle stream start 1-20 us after their call (median)",
      med is not None and 1.0 <= med <= 20.0, idle_launches=len(idle_gaps), median_gap_us=med,
      gaps_us=[round(g, 2) for g in idle_gaps])
print(f"   launch->start: median {med_all} us over all {len(gaps)} flows (queued ones included); "
      f"median {med} us over the {len(idle_gaps)} launches onto an idle stream; calibrations {len(cals)}, "
      f"max uncertainty {unc:.3f} us", flush=True)

json.dump({"checks": results, "failures": len(failed), "launch_to_start_us": gaps, "idle_launch_to_start_us": idle_gaps, "host_calls": host,
           "calibrations": cals, "profile": lp}, open(os.path.join(out, "host_examples.json"), "w"), indent=1)
print(f"{len(failed)} failures of {len(results)} checks", flush=True)
sys.exit(1 if failed else 0)
