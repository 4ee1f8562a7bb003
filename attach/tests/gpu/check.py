"""Device tests of `bpftime-super trace` on real programs (run by run.sh on the GPU machine).

For each app: run it plain, then under trace with examples/kernel_count.bpf.o (launches and
threads per kernel). The probes' totals must equal what the app says it launched, and its
output (timings removed) must be identical. Exact ctx checks with tests/programs/kprobe_all
on vecadd. Writes OUT/tests.json; exits 1 on any failure."""
import json, os, re, subprocess, sys, time

out = sys.argv[1]
B, SHIM, carry, apps = (os.environ[k] for k in ("B", "SHIM", "carry", "apps"))
results, failures = [], 0


def run(cmd, env=None, timeout=90):
    e = dict(os.environ, **(env or {}))
    t = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e, start_new_session=True)
    try:
        o, er = p.communicate(timeout=timeout)
        return p.returncode, o, er, time.time() - t
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        o, er = p.communicate()
        return -999, o, er + f"\nTIMEOUT after {timeout}s", time.time() - t


def trace(probes, cmd, env=None, opts=()):
    return run([B, "trace", "--json", "--interval", "0", "--shim", SHIM, *opts, *probes, "--", *cmd], env)


def strip_timing(s):
    return re.sub(r"kernel_us=[0-9.]+", "", s).strip()


def events(stdout, kind):
    for line in stdout.splitlines():
        try:
            v = json.loads(line)
        except ValueError:
            continue
        if v.get("event") == kind:
            yield v


def final_map(stdout, name):
    for m in events(stdout, "map"):
        if m["map"] == name and m["final"]:
            return {e["key"]: e["value"][0] for e in m["printed"]}
    return None


def check(name, cmd, expect_launches=None, expect_threads=None, env=None, sass_only=False, kernel=None, opts=()):
    global failures
    rc0, o0, e0, t0 = run(cmd, env)
    rc1, o1, e1, t1 = trace([f"{carry}/kernel_count.bpf.o"], cmd, env, opts)
    app_out = "\n".join(l for l in o1.splitlines() if not l.startswith("{"))
    m = re.search(r"launches=(\d+) threads=(\d+)", o0)
    launches = int(m.group(1)) if m else expect_launches
    threads = int(m.group(2)) if m else expect_threads
    L = final_map(o1, "kernel_count:launches") or {}
    T = final_map(o1, "kernel_count:threads") or {}
    warnings = [w["what"] for w in events(o1, "warning")]
    attach = sorted({a["demangled"] for a in events(o1, "attach")})
    r = {
        "app": name, "cmd": " ".join(cmd), "plain_rc": rc0, "trace_rc": rc1,
        "output_same": strip_timing(o0) == strip_timing(app_out),
        "expected_launches": launches, "expected_threads": threads,
        "probe_launches": sum(v for k, v in L.items() if kernel is None or kernel in k),
        "probe_threads": sum(v for k, v in T.items() if kernel is None or kernel in k),
        "per_kernel_launches": L, "per_kernel_threads": T, "attached": attach,
        "warnings": warnings[:5], "n_warnings": len(warnings),
        "plain_s": round(t0, 3), "trace_s": round(t1, 3),
    }
    ok = rc0 == 0 and rc1 == 0 and r["output_same"]
    if sass_only:
        ok = ok and any("SASS-only" in w for w in warnings)
    else:
        ok = ok and r["probe_launches"] == launches and r["probe_threads"] == threads
    r["ok"] = ok
    if not ok:
        failures += 1
        r["plain_stderr"], r["trace_stderr"] = e0[-2000:], e1[-3000:]
        r["plain_stdout"], r["trace_stdout"] = o0[-1000:], o1[-3000:]
    results.append(r)
    print(("PASS " if ok else "FAIL ") + json.dumps({k: r[k] for k in ("app", "expected_launches", "probe_launches", "expected_threads", "probe_threads", "output_same", "n_warnings")}))


a = apps
# Exact ctx fields on vecadd: n = 2^16, block 256, grid 256, 3 launches (every thread does
# 11 atomic adds on a host-mapped array: kept small).
rc, o, e, _ = trace([f"{carry}/kprobe_all.bpf.o"], [f"{a}/vecadd", "65536", "3"])
F = final_map(o, "kprobe_all:fields") or {}
n, blk, grid, it = 1 << 16, 256, 256, 3
want = {
    "2": it * grid * sum(range(blk)),            # sum of threadIdx.x
    "3": it * blk * sum(range(grid)),            # sum of blockIdx.x
    "4": it * n * blk,                           # block size, per thread
    "5": it * n * grid,                          # grid size, per thread
    "6": it * (n - 1) * n // 2,                  # global thread ids
}
want_fields = want
got = {k: F.get(k) for k in want}
ok = rc == 0 and got == want and F.get("7", 0) > 0 and F.get("10", 0) > 0
results.append({"app": "vecadd ctx fields (kprobe_all)", "ok": ok, "want": want, "got": got,
                "timer_sum_nonzero": F.get("7", 0) > 0, "stderr": e[-1500:] if not ok else ""})
failures += 0 if ok else 1
print(("PASS " if ok else "FAIL ") + "ctx fields " + json.dumps(got))

# BPF_KPROBE reads the kernel's int parameter (PARM4 = n).
rc, o, e, _ = trace([f"{carry}/vecadd_args.bpf.o"], [f"{a}/vecadd", "1000000", "5"])
V = final_map(o, "vecadd_args:vecadd_n") or {}
ok = rc == 0 and V.get("0") == 5 and V.get("1") == 5 * 1000000
results.append({"app": "BPF_KPROBE PARM4 (vecadd_args)", "ok": ok, "got": V, "want": {"0": 5, "1": 5000000}})
failures += 0 if ok else 1
print(("PASS " if ok else "FAIL ") + "BPF_KPROBE args " + json.dumps(V))

# The counting probe (every thread adds 1 to one counter: warp-aggregated adds, on the SM's
# stripe of the device copy) counts every thread exactly, with the map in device memory
# (default), in host-mapped memory, and with modules loaded through the JIT linker;
# kprobe_all's sums are the same with host-mapped maps.
for label, opts, env in (("striped device map", (), None), ("host-mapped map", ("--maps", "host"), None),
                         ("striped device map, --jit-linker", ("--jit-linker",), None)):
    rc0, o0, _, _ = run([f"{a}/vecadd", "1048576", "3"])
    m = re.search(r"threads=(\d+)", o0)
    rc, o, e, _ = trace([f"{carry}/count.bpf.o"], [f"{a}/vecadd", "1048576", "3"], env, opts)
    C = final_map(o, "count:entries") or {}
    want = int(m.group(1)) if m else None
    ok = rc0 == 0 and rc == 0 and want is not None and C.get("0") == want
    results.append({"app": f"counting probe, {label}", "ok": ok, "want": want, "got": C.get("0"),
                    "stderr": e[-1500:] if not ok else ""})
    failures += 0 if ok else 1
    print(("PASS " if ok else "FAIL ") + f"counting probe, {label}: want {want} got {C.get('0')}")
rc, o, e, _ = trace([f"{carry}/kprobe_all.bpf.o"], [f"{a}/vecadd", "65536", "3"], opts=("--maps", "host"))
H = final_map(o, "kprobe_all:fields") or {}
ok = rc == 0 and {k: H.get(k) for k in want_fields} == want_fields
results.append({"app": "ctx fields, host-mapped maps", "ok": ok, "got": {k: H.get(k) for k in want_fields}})
failures += 0 if ok else 1
print(("PASS " if ok else "FAIL ") + "ctx fields, host-mapped maps")

check("vecadd (static cudart)", [f"{a}/vecadd", "1048576", "3"])
check("vecadd (-cudart shared)", [f"{a}/vecadd_shared", "1000000", "4", "128"])
check("sgemm", [f"{a}/sgemm", "512", "2"])
check("graph (stream capture, 2 kernel nodes)", [f"{a}/graph", "100000", "5"])
check("coop (cudaLaunchCooperativeKernel)", [f"{a}/coop"])
check("driver_api (7 load paths x 3 launch calls)", [f"{a}/driver_api", f"{a}/vecadd.ptx", f"{a}/vecadd.fatbin"])
# Numba emits LTO-IR (no probes possible) when nvJitLink is installed: --numba-ptx makes it emit PTX.
check("numba (--numba-ptx)", ["python3", f"{a}/numba_app.py", "100000", "3"], kernel="saxpy", opts=("--numba-ptx",))
check("cupy RawKernel", ["python3", f"{a}/cupy_app.py", "100000", "3"], kernel="scale_add")
check("pytorch (SASS-only kernels)", ["python3", f"{a}/torch_app.py"], sass_only=True)

json.dump({"failures": failures, "results": results}, open(os.path.join(out, "tests.json"), "w"), indent=1)
print(f"{len(results) - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
