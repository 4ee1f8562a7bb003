"""Host-side checks and benchmarks on the GPU machine (run by `run.sh OUT host`):

1. Host-probe cost per intercepted call: `launch_loop` (an empty kernel launched 100,000
   times) plain, under `trace` with no programs, with `--api-log`, with an empty uprobe on
   the launch functions and with a counting one; alternating, 5 repetitions. The counting
   probe's total must equal the launches the app made.
2. Which driver entry points real programs use, from `llm-cache observe`'s call counts:
   a static-cudart nvcc program (vecadd) and PyTorch (torch_app.py).
3. llm-cache's live LRU in eBPF (512 MiB) on the offloaded Llama, against `simulate --policy
   lru` on the trace of the same run: lookups, hits and bytes moved must be equal.
Writes OUT/host.json."""
import json
import os
import re
import statistics
import subprocess
import sys

out = sys.argv[1]
B, SHIM, carry, apps = (os.environ[k] for k in ("B", "SHIM", "carry", "apps"))
LLM = os.path.join(carry, "bpftime-super-llm-cache")
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.abspath(os.path.join(here, "../../.."))
results = {"checks": [], "launch": [], "calls": {}, "live_lru": None}


def run(cmd, timeout=600):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def check(name, ok, **kw):
    results["checks"].append({"check": name, "ok": bool(ok), **kw})
    print(("PASS " if ok else "FAIL ") + name, flush=True)
    if not ok:
        print("   ", json.dumps(kw)[:2000], flush=True)


def final_maps(stdout):
    maps = {}
    for line in stdout.splitlines():
        try:
            v = json.loads(line)
        except ValueError:
            continue
        if v.get("event") == "map" and v.get("final"):
            maps[v["map"]] = {e["key"]: e["value"][0] for e in v.get("printed", [])}
    return maps


# 1. Cost per intercepted launch.
N = 100000
trace = [B, "trace", "--interval", "0", "--json", "--shim", SHIM]
configs = {
    "plain": [],
    "trace, no programs": trace + ["--"],
    "trace --api-log": trace + ["--api-log", "/tmp/launch.apilog", "--"],
    "empty uprobe on cuLaunchKernel(Ex)": trace + [f"{carry}/uprobe_empty.bpf.o", "--"],
    "counting uprobe (hash map by function)": trace + [f"{carry}/uprobe_count.bpf.o", "--"],
}
samples = {c: [] for c in configs}
for rep in range(5):
    for name, pre in configs.items():
        if os.path.exists("/tmp/launch.apilog"):
            os.remove("/tmp/launch.apilog")
        rc, o, e = run(pre + [f"{apps}/launch_loop", str(N)])
        m = re.search(r"ns_per_launch=([0-9.]+)", o)
        if rc != 0 or not m:
            print(f"FAILED {name}: rc={rc} {o[-400:]} {e[-800:]}", flush=True)
            continue
        samples[name].append(float(m.group(1)))
        if name.startswith("counting") and rep == 0:
            maps = final_maps(o)
            total = sum(maps.get("uprobe_count:launches", {}).values())
            check("counting uprobe: launches counted = launches made (n + 1 warm-up)", total == N + 1,
                  counted=total, made=N + 1)
base = statistics.median(samples["plain"])
for name, s in samples.items():
    if s:
        med = statistics.median(s)
        results["launch"].append({"config": name, "ns_per_launch_median": med, "samples": s,
                                  "added_ns": med - base, "ratio": med / base})
        print(f"{name:44} {med:9.1f} ns/launch  +{med - base:7.1f} ns  x{med / base:6.3f}", flush=True)

# 2. Which entry points programs use.
def observe(name, cmd, extra=()):
    trace_out = f"/tmp/{name}.trace"
    rc, o, e = run([LLM, "observe", "--json", "-o", trace_out, "--bpftime", B,
                    "--trace-arg=--shim", f"--trace-arg={SHIM}", *extra, "--", *cmd])
    i = o.rfind("\n{")
    doc = o[i + 1:] if i >= 0 else o[o.find("{"):]
    try:
        summary = json.loads(doc)
    except ValueError:
        summary = None
    return rc, o, e, summary, trace_out


for name, cmd in (("vecadd", [f"{apps}/vecadd", str(1 << 20), "3"]),
                  ("torch", ["python3", f"{apps}/torch_app.py"])):
    rc, o, e, s, _ = observe(name, cmd)
    check(f"observe {name}: runs and logs copies", rc == 0 and s is not None and s["h2d_copies"] + s["d2h_copies"] > 0,
          rc=rc, err=e[-600:], summary=s)
    if s:
        results["calls"][name] = s
        print(f"   {name}: {s['calls']}", flush=True)

# 3. The live LRU against the simulator, on the offloaded Llama.
live_probe = f"{carry}/live_lru_512m.bpf.o"
rc, o, e, s, tr = observe("llama", ["python3", f"{root}/llm-cache/examples/offload_llama.py", "/tmp/names.csv"],
                          extra=["--names", "/tmp/names.csv", "--trace-arg=--json", f"--trace-arg={live_probe}"])
maps = final_maps(o)
live = maps.get("live_lru_512m:lru", {})
live = [int(live.get(str(k), 0)) for k in range(5)]
m = re.search(r"expected_h2d=(\d+)", o)
rc2, so, se = run([LLM, "simulate", tr, "--capacity", "512MB", "--policy", "lru", "--json"])
try:
    sim = json.loads(so)[0]
except (ValueError, IndexError):
    sim = None
results["live_lru"] = {"live": live, "simulated": sim, "summary": s, "app": o.splitlines()[:1]}
check("observe llama: observed host-to-device bytes = expected (resident once + offloaded x forwards) within 1%",
      s is not None and m is not None and abs(s["h2d_bytes"] - int(m.group(1))) <= 0.01 * int(m.group(1)),
      observed=s and s["h2d_bytes"], expected=m and int(m.group(1)))
check("live LRU in eBPF (512 MiB) = simulate --policy lru at 512 MiB: lookups, hits, bytes moved",
      sim is not None and live[4] == 0 and (live[0], live[1], live[2]) == (sim["accesses"], sim["hits"], sim["bytes_moved"]),
      live=live, simulated=sim, err=e[-600:])
if s:
    print(f"   llama: {s['calls']}", flush=True)
print(f"   live lru {live} simulated {sim and (sim['accesses'], sim['hits'], sim['bytes_moved'])}", flush=True)

results["failures"] = sum(1 for c in results["checks"] if not c["ok"])
with open(os.path.join(out, "host.json"), "w") as f:
    json.dump(results, f, indent=1)
print(f"{results['failures']} failures", flush=True)
