"""Device tests and benchmarks of memory probes (run by run.sh with `mem`).

Tests: memtest's kernels (strided reads, a gather, 16-byte vectors, atomics, generic
pointers into shared memory) under tests/programs/mem_exact.bpf.o. For every site the
probes' count and the sums of addresses, values, sizes, spaces and ops, and the sectors per
request, must equal what the kernels did, computed here from the buffers memtest prints.
Then STREAM triad and SGEMM must give bit-identical output under the counting probe, and
the counting probe's totals must equal the accesses the kernels make.

Benchmarks (same binary, same run, alternating): plain, trace with no programs, the
counting probe examples/mem_count.bpf.o, and examples/coalescing.bpf.o, on STREAM triad
2^26 floats and SGEMM 4096^2. Writes OUT/mem.json."""
import json, os, re, statistics, subprocess, sys, time

out = sys.argv[1]
B, SHIM, carry, apps = (os.environ[k] for k in ("B", "SHIM", "carry", "apps"))
M64 = (1 << 64) - 1
results, failures = [], 0


# CuPy compiles RawKernels to cubins unless told otherwise; trace tells it to keep PTX, and
# the plain and ncu runs do the same so that every run executes the same kernels.
ENV = dict(os.environ, CUPY_COMPILE_WITH_PTX="1")


def run(cmd, timeout=300):
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env=ENV)
    try:
        o, e = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        o, e = p.communicate()
        return -999, o, e + f"\nTIMEOUT {timeout}s", time.perf_counter() - t
    return p.returncode, o, e, time.perf_counter() - t


def trace(probes, cmd, *opts):
    return [B, "trace", "--json", "--interval", "0", "--shim", SHIM, *opts, *probes, "--", *cmd]


def parse(stdout):
    sites, maps, warnings = {}, {}, []
    for line in stdout.splitlines():
        try:
            v = json.loads(line)
        except ValueError:
            continue
        ev = v.get("event")
        if ev == "sites":
            for s in v["sites"]:
                sites[s["id"]] = s
        elif ev == "map" and v["final"]:
            m = {}
            for k, val in v["entries"]:
                key = int.from_bytes(bytes.fromhex(k), "little")
                m[key] = int.from_bytes(bytes.fromhex(val), "little")
            maps[v["map"].split(":", 1)[1]] = m
        elif ev == "warning":
            warnings.append(v["what"])
    return sites, maps, warnings


def record(name, ok, **detail):
    global failures
    results.append({"test": name, "ok": ok, **detail})
    if not ok:
        failures += 1
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else f": {json.dumps(detail)[:3000]}"), flush=True)


def sectors(addrs):
    """Sectors per warp request: distinct 32-byte sectors of each 32-lane group, summed."""
    return sum(len({a >> 5 for a in addrs[w:w + 32]}) for w in range(0, len(addrs), 32))


def memtest():
    n = 1 << 16
    cmd = [f"{apps}/memtest", str(n)]
    rc0, o0, e0, _ = run(cmd)
    rc1, o1, e1, _ = run(trace([f"{carry}/mem_exact.bpf.o"], cmd))
    app0 = [l for l in o0.splitlines() if not l.startswith("{")]
    app1 = [l for l in o1.splitlines() if not l.startswith("{")]
    cs0 = re.search(r"checksum=(\w+)", o0)
    cs1 = re.search(r"checksum=(\w+)", o1)
    record("memtest runs and its output is unchanged under the probes",
           rc0 == 0 and rc1 == 0 and cs0 and cs1 and cs0.group(1) == cs1.group(1),
           rc=[rc0, rc1], plain=o0[-600:], traced="\n".join(app1)[-600:], err=e1[-2000:])
    if rc1 != 0:
        return
    sites, maps, warnings = parse(o1)
    bufs = {}
    for l in app0 + app1:
        m = re.match(r"kernel=(\w+) (.*)", l)
        if m:
            kv = dict(x.split("=") for x in m.group(2).split())
            bufs.setdefault(m.group(1), []).append({k: int(v, 0) for k, v in kv.items()})
    # The traced run's buffers are the ones the probes saw.
    info = {k: v[-1] for k, v in bufs.items()}

    def kernel_sites(name):
        return sorted((s for s in sites.values() if name in s["kernel"]), key=lambda s: s["ptx_line"])

    def got(s):
        i = s["id"]
        return {k: maps.get(f"{k}_site", {}).get(i, 0) for k in
                ("n", "bytes", "addr", "value", "hi", "space", "op", "req", "sect", "tid")}

    def expect(name, s, **want):
        g = got(s)
        bad = {k: (g[k], v & M64) for k, v in want.items() if g[k] != v & M64}
        record(f"{name}: site {s['id']} {s['opcode']} ({s.get('file')}:{s.get('line')})", not bad, mismatches=bad)

    tri = lambda k: k * (k - 1) // 2
    # strided: out[i] = in[3 i]
    k = info["strided"]; n_, st = k["n"], k["stride"]
    ss = kernel_sites("strided")
    if len(ss) != 2:
        record("strided: 2 sites", False, sites=ss)
    else:
        la = [k["in"] + 4 * i * st for i in range(n_)]
        sa = [k["out"] + 4 * i for i in range(n_)]
        expect("strided load", ss[0], n=n_, bytes=4 * n_, addr=sum(la), value=st * tri(n_), space=n_, op=0,
               req=n_ // 32, sect=sectors(la), tid=tri(n_))
        expect("strided store", ss[1], n=n_, bytes=4 * n_, addr=sum(sa), value=st * tri(n_), space=n_, op=n_,
               req=n_ // 32, sect=sectors(sa), tid=tri(n_))
    # gather: out[i] = in[idx[i]], idx[i] = i * mult % n
    k = info["gather"]; n_, mult = k["n"], k["mult"]
    idx = [(i * mult) % n_ for i in range(n_)]
    ss = kernel_sites("gather")
    if len(ss) != 3:
        record("gather: 3 sites", False, sites=ss)
    else:
        ia = [k["idx"] + 4 * i for i in range(n_)]
        ga = [k["in"] + 4 * j for j in idx]
        expect("gather index load", ss[0], n=n_, addr=sum(ia), value=sum(idx), req=n_ // 32, sect=sectors(ia))
        expect("gather load", ss[1], n=n_, addr=sum(ga), value=sum(idx), req=n_ // 32, sect=sectors(ga))
        expect("gather store", ss[2], n=n_, value=sum(idx), op=n_)
    # vec4: 16-byte loads and stores; word j = j
    k = info["vec4"]; n_ = k["n"]
    ss = kernel_sites("vec4")
    if len(ss) != 2:
        record("vec4: 2 sites", False, sites=ss)
    else:
        lo = sum((4 * i) | ((4 * i + 1) << 32) for i in range(n_))
        hi = sum((4 * i + 2) | ((4 * i + 3) << 32) for i in range(n_))
        va = [k["in"] + 16 * i for i in range(n_)]
        expect("vec4 load", ss[0], n=n_, bytes=16 * n_, addr=sum(va), value=lo, hi=hi, sect=sectors(va),
               req=n_ // 32)
        expect("vec4 store", ss[1], n=n_, bytes=16 * n_, value=lo, hi=hi, op=n_)
    # atomics: +1 on c[i & 7], +2 on c[8 + (i & 7)], then the old value stored
    k = info["atomics"]; n_ = k["n"]
    ss = kernel_sites("atomics")
    if len(ss) != 3:
        record("atomics: 3 sites", False, sites=ss)
    else:
        a1 = [k["c"] + 4 * (i & 7) for i in range(n_)]
        a2 = [k["c"] + 4 * (8 + (i & 7)) for i in range(n_)]
        expect("atomic +1", ss[0], n=n_, addr=sum(a1), value=n_, op=2 * n_, sect=sectors(a1), req=n_ // 32)
        expect("atomic +2", ss[1], n=n_, addr=sum(a2), value=2 * n_, op=2 * n_, sect=sectors(a2))
        expect("store of the old values", ss[2], n=n_, op=n_)
    # generic: st/ld through a pointer into shared memory, then a global store
    k = info["generic"]; n_, g = k["n"], k["blocks"]
    ss = kernel_sites("generic")
    vs = g * 5 * tri(256)
    gen = [s for s in ss if s["space"] == "generic"]
    if len(ss) != 3 or len(gen) != 2:
        record("generic: 2 generic sites and a global store", False, sites=ss)
    else:
        expect("generic store into shared", ss[0], n=n_, space=2 * n_, value=vs, op=n_)
        expect("generic load from shared", ss[1], n=n_, space=2 * n_, value=vs, op=0)
        expect("global store", ss[2], n=n_, space=n_, value=vs + n_)
    record("no warning", not warnings, warnings=warnings)


def identical_and_counted():
    for name, cmd, per_thread in (("STREAM triad 2^24", [f"{apps}/stream", str(1 << 24), "3"], (2, 1)),
                                  ("SGEMM 1024^2", [f"{apps}/sgemm", "1024", "2"], None)):
        rc0, o0, _, _ = run(cmd)
        rc1, o1, e1, _ = run(trace([f"{carry}/mem_count.bpf.o"], cmd))
        c0 = re.search(r"checksum=(\w+)", o0)
        c1 = re.search(r"checksum=(\w+)", o1)
        record(f"{name}: bit-identical output under the counting probe",
               rc0 == 0 and rc1 == 0 and c0 and c1 and c0.group(1) == c1.group(1),
               plain=o0[-300:], traced=o1[-300:], err=e1[-1500:])
        sites, maps, _ = parse(o1)
        acc = maps.get("accesses_by_site", {})
        loads = sum(acc.get(i, 0) for i, s in sites.items() if s["op"] == "load")
        stores = sum(acc.get(i, 0) for i, s in sites.items() if s["op"] == "store")
        if per_thread:
            n_, it = 1 << 24, 3
            record(f"{name}: the counting probe saw every access", (loads, stores) == (2 * n_ * it, n_ * it),
                   loads=loads, stores=stores, want=[2 * n_ * it, n_ * it])
        else:
            # SGEMM 16x16 tiles: per thread and k-tile one load of A and one of B, one store.
            n_, it = 1024, 2
            want = (2 * n_ * n_ * (n_ // 16) * it, n_ * n_ * it)
            record(f"{name}: the counting probe saw every access", (loads, stores) == want,
                   loads=loads, stores=stores, want=list(want))


NCU_METRICS = {
    ("load", "requests"): "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    ("load", "sectors"): "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    ("store", "requests"): "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    ("store", "sectors"): "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
}


def ncu_compare():
    """examples/coalescing.bpf.o against Nsight Compute: per kernel, global load and store
    requests and sectors (atomics left out: ncu counts them apart). Within 10%."""
    import csv, io
    llm = {"rmsnorm", "matvec", "append_kv", "attention", "silu_gate", "add_inplace", "embed"}
    for name, cmd, only in (("memtest", [f"{apps}/memtest", str(1 << 16)], None),
                            ("STREAM triad 2^22, 1 launch", [f"{apps}/stream", str(1 << 22), "1"], None),
                            ("SGEMM 512^2, 1 launch", [f"{apps}/sgemm", "512", "1"], None),
                            ("a transformer decoding loop (CuPy RawKernels; 2 layers, 4 tokens)",
                             ["python3", f"{apps}/llm_cupy.py", "2", "4"], llm)):
        rc, o, e, _ = run(["ncu", "--clock-control", "none", "--csv", "--metrics",
                           ",".join(NCU_METRICS.values()), *cmd], timeout=300)
        if rc != 0:
            record(f"ncu on {name}", False, err=(o + e)[-1500:])
            continue
        want = {}
        rows = [r for r in csv.reader(io.StringIO(o)) if len(r) > 14]
        head = rows[0] if rows else []
        for r in rows[1:]:
            d = dict(zip(head, r))
            kname = d.get("Kernel Name", "")
            base = kname.split("(")[0].split(" ")[-1]
            for (op, what), metric in NCU_METRICS.items():
                if d.get("Metric Name") == metric:
                    v = float(d["Metric Value"].replace(",", "") or 0)
                    want[(base, op, what)] = want.get((base, op, what), 0) + v
        rc1, o1, e1, _ = run(trace([f"{carry}/coalescing.bpf.o"], cmd))
        open(os.path.join(out, "ncu_" + re.sub(r"\W+", "_", name)[:40] + ".csv"), "w").write(o)
        if only is not None:
            rc0, o0, _, _ = run(cmd)
            res = lambda t: (re.search(r"tokens=\[[^\]]*\] checksum=\S+", t) or [None])[0]
            record(f"{name}: same tokens and checksum under the coalescing probe",
                   rc0 == 0 and rc1 == 0 and res(o0) is not None and res(o0) == res(o1),
                   plain=o0[-400:], traced=o1[-400:], err=e1[-1500:])
        sites, maps, _ = parse(o1)
        got = {}
        for i, s in sites.items():
            # Explicit global accesses: ncu files generic ones by where they land.
            if s["op"] not in ("load", "store") or s["space"] != "global":
                continue
            kname = s["kernel"]
            for what, m in (("requests", "requests_by_site"), ("sectors", "sectors_by_site")):
                key = (kname, s["op"], what)
                got[key] = got.get(key, 0) + maps.get(m, {}).get(i, 0)
        # Match kernels by their demangled base name.
        def base_of(mangled):
            m = re.match(r"_Z(\d+)", mangled)
            return mangled[len(m.group(0)):len(m.group(0)) + int(m.group(1))] if m else mangled
        rows = []
        ok = True
        for (k, op, what), v in sorted(got.items()):
            b = base_of(k)
            if only is not None and b not in only:
                continue
            n = want.get((b, op, what))
            err = None if not n else abs(v - n) / n
            rows.append({"kernel": b, "op": op, "what": what, "probe": v, "ncu": n, "rel_err": err})
            if n is None or (n > 0 and err > 0.10) or (n == 0 and v != 0):
                ok = False
        tot = {}
        for r in rows:
            t = tot.setdefault((r["op"], r["what"]), [0, 0])
            t[0] += r["probe"]
            t[1] += r["ncu"] or 0
        totals = {f"{op} {what}": {"probe": v[0], "ncu": v[1], "rel_err": abs(v[0] - v[1]) / v[1] if v[1] else None}
                  for (op, what), v in sorted(tot.items())}
        record(f"coalescing probe vs ncu on {name} (requests and sectors within 10%)", ok and bool(rows), rows=rows,
               totals=totals)
        print(f"   totals: {json.dumps(totals)}", flush=True)
        results[-1]["rows"] = rows
        for r in rows:
            print(f"   {r['kernel']:10} {r['op']:5} {r['what']:8} probe {r['probe']:>12} ncu {r['ncu']}", flush=True)


def mem_report_check():
    """`trace --mem-report` on STREAM triad: bytes and sectors per request from the report."""
    n = 1 << 22
    cmd = [f"{apps}/stream", str(n), "1"]
    rc, o, e, _ = run([B, "trace", "--json", "--interval", "0", "--shim", SHIM, "--mem-report", "--", *cmd])
    rep = [v for v in (json.loads(l) for l in o.splitlines() if l.startswith("{"))
           if v.get("event") == "mem_report"]
    tot = rep[0]["kernels"][0]["total"] if rep and rep[0]["kernels"] else {}
    want = {"loaded": 8 * n, "stored": 4 * n, "load_requests": n // 16, "load_sectors": n // 4,
            "store_requests": n // 32, "store_sectors": n // 8, "accesses": 3 * n}
    bad = {k: (tot.get(k), v) for k, v in want.items() if tot.get(k) != v}
    record("--mem-report on STREAM triad: bytes, requests and sectors", rc == 0 and not bad,
           mismatches=bad, err=e[-1500:])
    for name, c in (("stream", cmd), ("memtest", [f"{apps}/memtest", str(1 << 16)])):
        rc, o, e, _ = run([B, "trace", "--interval", "0", "--quiet", "--shim", SHIM, "--mem-report", "--", *c])
        open(os.path.join(out, f"mem_report_{name}.txt"), "w").write(o + e)
        print(o[-3000:], flush=True)


def read_trace(path):
    import struct
    b = open(path, "rb").read()
    assert b[:8] == b"BPFTMTR1", "trace header"
    return [struct.unpack_from("<QQIIII", b, o) for o in range(64, len(b) - 31, 32)]


def mem_trace_check():
    """`trace --mem-trace`: every access of memtest is in the file, exactly; a small ring
    drops (and counts) instead of waiting, and the app's output is unchanged."""
    n = 1 << 16
    cmd = [f"{apps}/memtest", str(n)]
    rc0, o0, _, _ = run(cmd)
    f = "/tmp/memtest.trace"
    rc, o, e, _ = run([B, "trace", "--json", "--interval", "0", "--shim", SHIM, "--mem-trace", f, "--", *cmd])
    done = [v for v in (json.loads(l) for l in o.splitlines() if l.startswith("{")) if v.get("event") == "mem_trace"]
    sites, _, _ = parse(o)
    recs = read_trace(f) if os.path.exists(f) else []
    cs = lambda t: (re.search(r"checksum=(\w+)", t) or [None, None])[1]
    ok = rc == 0 and done and done[0]["dropped"] == 0 and len(recs) == 13 * n and cs(o) == cs(o0)
    record("--mem-trace: every access of memtest recorded, none dropped, output unchanged", bool(ok),
           records=len(recs), done=done, err=e[-1500:])
    # The strided kernel's load addresses, exactly; indices are 0..N-1 in order.
    info = {}
    for l in o.splitlines():
        m = re.match(r"kernel=(\w+) (.*)", l)
        if m:
            info[m.group(1)] = {k: int(v, 0) for k, v in (x.split("=") for x in m.group(2).split())}
    k = info.get("strided", {})
    ld = [s for s in sites.values() if "strided" in s["kernel"] and s["op"] == "load"]
    if ld and k:
        got = sorted(r[0] for r in recs if r[2] == ld[0]["id"])
        want = sorted(k["in"] + 4 * i * k["stride"] for i in range(k["n"]))
        record("--mem-trace: the strided load's addresses are exactly the kernel's", got == want,
               got_n=len(got), want_n=len(want), first=[hex(x) for x in got[:4]])
    # Overflow: the smallest ring (2^20 records) and memtest at 2^19 (13 * 2^19 accesses,
    # drained only at exit); the kernels never wait, every access is written or counted.
    n2 = 1 << 19
    cmd2 = [f"{apps}/memtest", str(n2)]
    _, o02, _, _ = run(cmd2)
    f2 = "/tmp/small.trace"
    rc, o, e, _ = run([B, "trace", "--json", "--interval", "0", "--shim", SHIM, "--mem-trace", f2,
                       "--mem-trace-records", "1024", "--", *cmd2])
    done = [v for v in (json.loads(l) for l in o.splitlines() if l.startswith("{")) if v.get("event") == "mem_trace"]
    recs2 = read_trace(f2) if os.path.exists(f2) else []
    ok = rc == 0 and done and done[0]["dropped"] > 0 and len(recs2) + done[0]["dropped"] == 13 * n2 \
        and cs(o) == cs(o02) and done[0]["records"] == len(recs2)
    record("--mem-trace, smallest ring, full: drops counted, records + drops = accesses, output unchanged", bool(ok),
           records=len(recs2), done=done, accesses=13 * n2, err=e[-1500:])
    rc, o, e, _ = run([B, "memtrace", f])
    open(os.path.join(out, "memtrace_memtest.txt"), "w").write(o + e)
    print(o[-2500:], flush=True)
    # A ring that was full keeps streaming: 2^20 records drained every 5 ms while the
    # triad makes 3 * 2^22 * 3000 accesses; the file gets more records than the ring holds, and
    # every access is in the file or in the drops.
    n, reps, cap = 1 << 22, 3000, 1 << 20
    cmd = [f"{apps}/stream", str(n), str(reps)]
    rc0, o0, _, _ = run(cmd)
    f3 = "/tmp/stream.trace"
    rc, o, e, _ = run([B, "trace", "--json", "--interval", "5ms", "--shim", SHIM, "--mem-trace", f3,
                       "--mem-trace-records", str(cap), "--", *cmd])
    done = [v for v in (json.loads(l) for l in o.splitlines() if l.startswith("{")) if v.get("event") == "mem_trace"]
    recs3 = read_trace(f3) if os.path.exists(f3) else []
    written = done[0]["records"] if done else -1
    dropped = done[0]["dropped"] if done else -1
    ok = rc == 0 and written == len(recs3) and written > cap and written + dropped == 3 * n * reps \
        and cs(o) == cs(o0)
    record("--mem-trace keeps streaming after the ring filled (2^20 records, drained every 5 ms)", bool(ok),
           records=len(recs3), reported=done, accesses=3 * n * reps, ring=cap, err=e[-1500:])
    if recs3:
        os.remove(f3)


def llm_reports():
    """The real program under `--mem-report` and under `--mem-trace --plot`."""
    cmd = ["python3", f"{apps}/llm_cupy.py", "2", "8"]
    rc, o, e, _ = run([B, "trace", "--interval", "0", "--quiet", "--shim", SHIM, "--mem-report", "--", *cmd])
    open(os.path.join(out, "mem_report_llm.txt"), "w").write(o + e)
    record("--mem-report on the transformer decoding loop completes", rc == 0 and "matvec" in o, err=e[-1500:])
    print(o[-4000:], flush=True)
    for name, c in (("llm", cmd), ("sgemm", [f"{apps}/sgemm", "1024", "1"])):
        f = os.path.join(out, f"{name}.trace")
        pd = os.path.join(out, f"plots_{name}")
        rc, o, e, _ = run([B, "trace", "--interval", "100ms", "--quiet", "--shim", SHIM, "--mem-trace", f,
                           "--plot", pd, "--", *c])
        pngs = sorted(os.listdir(pd)) if os.path.isdir(pd) else []
        open(os.path.join(out, f"memtrace_{name}.txt"), "w").write(o + e)
        record(f"--mem-trace --plot on {name}: a trace and its PNG plots", rc == 0 and len(pngs) >= 2, pngs=pngs,
               err=e[-1500:])
        print(o[-3000:], flush=True)
        if os.path.exists(f):
            os.remove(f)


def bench():
    REPS = 5
    configs = {
        "plain": lambda c: c,
        "trace, no programs": lambda c: [B, "trace", "--interval", "0", "--quiet", "--shim", SHIM, "--", *c],
        "counting probe on every global access (mem_sites: +1 per site)":
            lambda c: [B, "trace", "--interval", "0", "--quiet", "--shim", SHIM, f"{carry}/mem_sites.bpf.o", "--", *c],
        "mem_count example (+1 and +bytes per site)":
            lambda c: [B, "trace", "--interval", "0", "--quiet", "--shim", SHIM, f"{carry}/mem_count.bpf.o", "--", *c],
        "counting probe, --mem-eager (no sums kept in registers)":
            lambda c: [B, "trace", "--interval", "0", "--quiet", "--shim", SHIM, "--mem-eager",
                       f"{carry}/mem_sites.bpf.o", "--", *c],
        "coalescing probe (warp-wide sectors, leader adds)":
            lambda c: [B, "trace", "--interval", "0", "--quiet", "--shim", SHIM, f"{carry}/coalescing.bpf.o", "--", *c],
        "--mem-trace (a record per access to a 2^22-record device ring; drops counted)":
            lambda c: [B, "trace", "--interval", "0", "--quiet", "--shim", SHIM, "--mem-trace", "/tmp/bench.trace", "--", *c],
        "--mem-trace drained every 100 ms":
            lambda c: [B, "trace", "--interval", "100ms", "--quiet", "--shim", SHIM, "--mem-trace", "/tmp/bench.trace", "--", *c],
        "counting probe, sampled 1 in 16":
            lambda c: [B, "trace", "--interval", "0", "--quiet", "--shim", SHIM, "--sample", "16",
                       f"{carry}/mem_sites.bpf.o", "--", *c],
    }
    workloads = {"STREAM triad 2^26 floats": [f"{apps}/stream", str(1 << 26), "10"],
                 "SGEMM 4096^2": [f"{apps}/sgemm", "4096", "5"]}
    rows = []
    for wname, cmd in workloads.items():
        samples = {c: [] for c in configs}
        for _ in range(REPS):
            for cname, f in configs.items():
                rc, o, e, w = run(f(cmd), timeout=120)
                m = re.search(r"kernel_us=([0-9.]+)", o)
                if rc == 0 and m:
                    samples[cname].append(float(m.group(1)))
                else:
                    print(f"FAILED {cname} {wname}: rc={rc} {o[-500:]} {e[-800:]}", flush=True)
        base = statistics.median(samples["plain"]) if samples["plain"] else None
        for cname, s in samples.items():
            if not s or base is None:
                rows.append({"workload": wname, "config": cname, "kernel_us_median": None})
                continue
            k = statistics.median(s)
            rows.append({"workload": wname, "config": cname, "kernel_us_median": k, "kernel_us_samples": s,
                         "kernel_ratio": k / base, "reps": REPS})
            print(f"{wname:26} {cname:60} {k:10.1f} us  x{k / base:6.3f}", flush=True)
    return rows


def bench_full():
    """A full trace, nothing dropped: a ring of 2^30 records (43 GB) holds every access of
    two triad launches of 2^25 floats (the app times the second) and three SGEMM 1024^2
    (the median launch); the kernels write every record while they run, and the shim copies
    them out at exit (to /dev/shm)."""
    REPS = 3
    rows = []
    for wname, cmd, acc in (("STREAM triad 2^25 floats", [f"{apps}/stream", str(1 << 25), "2"], 2 * 3 << 25),
                            ("SGEMM 1024^2", [f"{apps}/sgemm", "1024", "3"], 3 * ((1 << 27) + (1 << 20)))):
        plain, traced, bad = [], [], []
        for _ in range(REPS):
            rc, o, e, _ = run(cmd)
            m = re.search(r"kernel_us=([0-9.]+)", o)
            if rc == 0 and m:
                plain.append(float(m.group(1)))
            f = "/dev/shm/full.trace"
            rc, o, e, _ = run([B, "trace", "--json", "--interval", "0", "--shim", SHIM, "--mem-trace", f,
                               "--mem-trace-records", str(1 << 30), "--", *cmd], timeout=200)
            done = [v for v in (json.loads(l) for l in o.splitlines() if l.startswith("{"))
                    if v.get("event") == "mem_trace"]
            m = re.search(r"kernel_us=([0-9.]+)", o)
            if rc == 0 and m and done and done[0]["dropped"] == 0 and done[0]["records"] == acc:
                traced.append(float(m.group(1)))
            else:
                bad.append({"rc": rc, "done": done, "err": e[-800:]})
            if os.path.exists(f):
                os.remove(f)
        record(f"full trace of {wname}: every access recorded, none dropped", not bad and bool(traced), bad=bad)
        if plain and traced:
            b, k = statistics.median(plain), statistics.median(traced)
            rows.append({"workload": wname, "config": "--mem-trace, every record kept (2^30-record ring)",
                         "plain_us_samples": plain, "kernel_us_samples": traced, "kernel_ratio": k / b,
                         "records": acc, "reps": REPS})
            print(f"{wname:36} full trace {k:10.1f} us vs plain {b:10.1f} us  x{k / b:6.3f}", flush=True)
    return rows


what = sys.argv[2] if len(sys.argv) > 2 else "all"
if what in ("all", "tests"):
    memtest()
    identical_and_counted()
    ncu_compare()
    mem_report_check()
    mem_trace_check()
    llm_reports()
if what == "exact":
    # The quick check: exact per-site sums and unchanged output, nothing else.
    memtest()
    identical_and_counted()
if what == "ncu":
    ncu_compare()
if what == "report":
    mem_report_check()
    mem_trace_check()
    llm_reports()
rows = bench() + bench_full() if what in ("all", "bench") else []
json.dump({"tests": results, "failures": failures, "bench": rows}, open(os.path.join(out, "mem.json"), "w"), indent=1)
print(f"{failures} failures", flush=True)
sys.exit(1 if failures else 0)
