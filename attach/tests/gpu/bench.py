"""Attach benchmarks on the GPU machine (run by run.sh). Same binary, same run, alternating:
plain, under trace with no programs, with an empty entry+exit probe, with a counting probe.
Kernel time is the app's own cudaEvent median over its iterations (first launch excluded);
wall time is the whole process. Writes OUT/bench.json."""
import json, os, re, statistics, subprocess, sys, time

out = sys.argv[1]
B, SHIM, carry, apps = (os.environ[k] for k in ("B", "SHIM", "carry", "apps"))
REPS = 5


def run(cmd, timeout=120):
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        o, e = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        p.communicate()
        return None, None
    wall = time.perf_counter() - t
    m = re.search(r"kernel_us=([0-9.]+)", o)
    if p.returncode != 0 or not m:
        print(f"FAILED {cmd}: rc={p.returncode}\n{o[-1500:]}\n{e[-1500:]}", flush=True)
        return None, None
    return float(m.group(1)), wall


def traced(probes, cmd, *opts, env=None):
    pre = ["env", *[f"{k}={v}" for k, v in (env or {}).items()]]
    return [*pre, B, "trace", "--interval", "0", "--quiet", "--shim", SHIM, *opts, *probes, "--", *cmd]


configs = {
    "plain": lambda c: c,
    "trace, no programs": lambda c: traced([], c),
    "empty entry+exit probe": lambda c: traced([f"{carry}/empty.bpf.o"], c),
    "empty probe, --jit-linker (relocatable code)": lambda c: traced([f"{carry}/empty.bpf.o"], c, "--jit-linker"),
    "kernel_count probe (thread 0 updates two hash maps)": lambda c: traced([f"{carry}/kernel_count.bpf.o"], c),
    "counting probe (1 add/thread: warp-aggregated, striped device map)": lambda c: traced([f"{carry}/count.bpf.o"], c),
    "launchlate probe (hidden launch parameters, thread 0 updates maps)": lambda c: traced([f"{carry}/launchlate.bpf.o"], c),
}
workloads = {
    "vector add 2^24 floats": [f"{apps}/vecadd", str(1 << 24), "50"],
    "SGEMM 4096^2": [f"{apps}/sgemm", "4096", "5"],
}
# The same probes with their maps in host-mapped memory (`--maps host`): once, time-limited.
HOSTMAPS = {
    "kernel_count probe, --maps host": "kernel_count.bpf.o",
    "counting probe, warp-aggregated, --maps host": "count.bpf.o",
}
rows = []
for wname, cmd in workloads.items():
    samples = {c: ([], []) for c in configs}
    for _ in range(REPS):
        for cname, f in configs.items():
            k, w = run(f(cmd))
            if k is not None:
                samples[cname][0].append(k)
                samples[cname][1].append(w)
    for cname, obj in HOSTMAPS.items():
        k, w = run(traced([f"{carry}/{obj}"], cmd[:-1] + ["3"], "--maps", "host"), timeout=90)
        samples[cname] = ([k], [w]) if k is not None else ([], [])
    base_k = statistics.median(samples["plain"][0])
    base_w = statistics.median(samples["plain"][1])
    for cname in samples:
        if not samples[cname][0]:
            rows.append({"workload": wname, "config": cname, "kernel_us_median": None, "note": "failed or timed out"})
            print(f"{wname:24} {cname:50} failed or timed out (90 s)", flush=True)
            continue
        k = statistics.median(samples[cname][0])
        w = statistics.median(samples[cname][1])
        rows.append({"workload": wname, "config": cname, "kernel_us_median": k,
                     "kernel_us_samples": samples[cname][0], "kernel_ratio": k / base_k,
                     "wall_s_median": w, "wall_ratio": w / base_w, "reps": REPS})
        print(f"{wname:24} {cname:50} kernel {k:10.1f} us  x{k / base_k:6.3f}   wall {w:6.3f} s  x{w / base_w:6.3f}", flush=True)

# First launch of a 1 MB PTX module: load + instrumentation + first launch, plain vs traced.
subprocess.run(["nvcc", "-ptx", "-arch=compute_90", "-o", f"{apps}/sgemm.ptx", os.path.join(os.path.dirname(__file__), "../apps/sgemm.cu")], check=True)
one = open(f"{apps}/sgemm.ptx").read()
head, body = one.split("// .globl", 1)
body = "// .globl" + body
name = "_Z5sgemmPKfS0_Pfi"
copies, parts = 0, [head]
while sum(map(len, parts)) < 1 << 20:
    parts.append(body.replace(name, f"{name}_{copies}"))
    copies += 1
big = f"{apps}/big.ptx"
open(big, "w").write("".join(parts))
load = {}
for cname, probes, opts, reps in (("plain", None, [], 3),
                                  ("kernel_count probe, --jit-linker", [f"{carry}/kernel_count.bpf.o"], ["--jit-linker"], 3),
                                  ("kernel_count probe (PTX, whole-program JIT)", [f"{carry}/kernel_count.bpf.o"], [], 1)):
    vals = []
    for _ in range(reps):
        cmd = [f"{apps}/load_time", big, f"{name}_0"]
        if probes is not None:
            cmd = [B, "trace", "--interval", "0", "--json", "--shim", SHIM, *opts, *probes, "--", *cmd]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        m = re.search(r"first_launch_ms=([0-9.]+)", p.stdout)
        inst = [json.loads(l)["micros"] for l in p.stdout.splitlines() if '"event":"module"' in l]
        vals.append({"first_launch_ms": float(m.group(1)) if m else None, "instrument_us": inst})
    load[cname] = vals
    print("1 MB PTX", cname, vals, flush=True)
json.dump({"rows": rows, "first_launch_1MB": {"bytes": os.path.getsize(big), "kernels": copies, "runs": load}},
          open(os.path.join(out, "bench.json"), "w"), indent=1)
