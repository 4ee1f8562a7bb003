//! Baselines the benchmarks compare the persistent kernel with, measured on the same GPU
//! in the same run: an empty kernel launch + synchronize, a one-node CUDA graph launch +
//! synchronize, and the device's copy bandwidths.

use super::DeviceError;
use super::driver::Gpu;
use std::time::Instant;

/// An empty kernel `bpft_empty(u64 *out, u64 v)`, and a stub `bpft_persistent` so the
/// module loads through [`Gpu::load_library`].
const EMPTY_PTX: &str = "
.version 8.0
.target sm_90
.address_size 64
.visible .entry bpft_empty(.param .u64 out, .param .u64 v)
{
	.reg .b64 %a, %b;
	.reg .pred %p;
	ld.param.u64 %a, [out];
	ld.param.u64 %b, [v];
	setp.eq.u64 %p, %a, 0;
	@%p bra done;
	st.global.u64 [%a], %b;
done:
	ret;
}
.visible .entry bpft_persistent(.param .align 8 .b8 params[8])
{
	ret;
}
";

/// Per-call latencies in µs: (`launch + sync`, `graph launch + sync`), `n` each after a
/// warm-up, with a value written by each launch checked afterwards.
pub fn launch_latencies(ordinal: i32, n: usize) -> Result<(Vec<f64>, Vec<f64>), DeviceError> {
    let gpu = Gpu::open(ordinal)?;
    let sm = super::device_sm(ordinal)?;
    let ptx = EMPTY_PTX.replace("sm_90", &format!("sm_{sm}"));
    let cubin = gpu.link(&[("empty.ptx", &ptx)])?;
    let lib = gpu.load_library(&cubin)?;
    let s = gpu.stream()?;
    let out = gpu.alloc(8)?;
    let mut launch = Vec::with_capacity(n);
    for i in 0..(n + 200) {
        let t = Instant::now();
        gpu.launch_empty(&lib, s, out, i as u64)?;
        gpu.sync(s)?;
        if i >= 200 {
            launch.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    let mut v = [0u8; 8];
    gpu.download(s, &mut v, out)?;
    if u64::from_le_bytes(v) != (n + 199) as u64 {
        return Err(DeviceError::Call {
            call: "baseline",
            code: "the empty kernel did not write its value".into(),
            log: String::new(),
        });
    }
    let g = gpu.empty_graph(&lib, s, out, 7)?;
    let mut graph = Vec::with_capacity(n);
    for i in 0..(n + 200) {
        let t = Instant::now();
        gpu.graph_launch(&g, s)?;
        gpu.sync(s)?;
        if i >= 200 {
            graph.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    gpu.download(s, &mut v, out)?;
    if u64::from_le_bytes(v) != 7 {
        return Err(DeviceError::Call {
            call: "baseline",
            code: "the graph's kernel did not write its value".into(),
            log: String::new(),
        });
    }
    gpu.free(out)?;
    gpu.unload(lib);
    Ok((launch, graph))
}

/// Copy bandwidths in GB/s over `bytes`-byte buffers, median of `reps`:
/// (device-to-device counting bytes read plus written, host-to-device from pinned memory).
pub fn copy_bandwidths(ordinal: i32, bytes: usize, reps: usize) -> Result<(f64, f64), DeviceError> {
    let gpu = Gpu::open(ordinal)?;
    let s = gpu.stream()?;
    let a = gpu.alloc(bytes)?;
    let b = gpu.alloc(bytes)?;
    let (h, _) = gpu.host_alloc(bytes)?;
    // SAFETY: `h` is a fresh pinned allocation of `bytes` bytes.
    let host = unsafe { std::slice::from_raw_parts_mut(h, bytes) };
    for (i, x) in host.iter_mut().enumerate() {
        *x = (i * 7 + 3) as u8;
    }
    let mut d2d = Vec::new();
    let mut h2d = Vec::new();
    gpu.upload(s, a, host)?;
    for _ in 0..reps + 1 {
        let t = Instant::now();
        gpu.copy(s, b, a, bytes)?;
        d2d.push(2.0 * bytes as f64 / t.elapsed().as_secs_f64() / 1e9);
        let t = Instant::now();
        gpu.upload(s, a, host)?;
        h2d.push(bytes as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    let mut check = vec![0u8; 4096];
    gpu.download(s, &mut check, b + (bytes as u64 - 4096))?;
    let ok = check
        .iter()
        .enumerate()
        .all(|(i, x)| *x == ((bytes - 4096 + i) * 7 + 3) as u8);
    gpu.free(a)?;
    gpu.free(b)?;
    gpu.host_free(h);
    if !ok {
        return Err(DeviceError::Call {
            call: "baseline",
            code: "the copied bytes differ".into(),
            log: String::new(),
        });
    }
    let med = |mut v: Vec<f64>| {
        v.remove(0);
        v.sort_by(|x, y| x.total_cmp(y));
        v[v.len() / 2]
    };
    Ok((med(d2d), med(h2d)))
}

/// The bare cross-process mailbox of `shared/probes/gpu1` (GPU-FACTS §1): one GPU thread
/// polls a request word in a shared mapping with volatile loads, answers `arg + 1`, fences
/// (`__threadfence_system`) and writes the done word. The job round trip of the persistent
/// service is compared with it in the same run. With `BPFT_MB_ONE_LOAD` defined
/// ([`MailboxPoll::OneLoad`]), the poll is instead one 16-byte acquire load of the request
/// word, the argument and the stop word together (GPU-FACTS §1's fastest mailbox, 4.1 µs in
/// one process on an H100, against 7.2 µs for two loads a poll); the answer is the same.
const MAILBOX_CU: &str = r#"
#ifdef BPFT_MB_ONE_LOAD
struct bpft_mb_params { unsigned long long mb; };
extern "C" __global__ void bpft_persistent(bpft_mb_params p) {
    char *mb = (char *)p.mb;
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    unsigned long long last = 0;
    for (;;) {
        unsigned long long s, w;
        do {
            // {request seq; argument (low half), stop (high half)} in one load.
            asm volatile("ld.acquire.sys.v2.u64 {%0, %1}, [%2];" : "=l"(s), "=l"(w) : "l"(mb + 32) : "memory");
            if (w >> 32) return;
        } while (s == last);
        last = s;
        *(volatile int *)(mb + 48) = (int)(unsigned)w + 1;
        __threadfence_system();
        *(volatile unsigned long long *)(mb + 56) = s;
    }
}
#else
struct bpft_mb {
    volatile unsigned long long seq_req, seq_done;
    volatile int arg, result;
    volatile int stop;
};
struct bpft_mb_params { unsigned long long mb; };
extern "C" __global__ void bpft_persistent(bpft_mb_params p) {
    bpft_mb *mb = (bpft_mb *)p.mb;
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    unsigned long long last = 0;
    for (;;) {
        unsigned long long s;
        do {
            s = mb->seq_req;
            if (mb->stop) return;
        } while (s == last);
        last = s;
        mb->result = mb->arg + 1;
        __threadfence_system();
        mb->seq_done = s;
    }
}
#endif
extern "C" __global__ void bpft_empty(unsigned long long *out, unsigned long long v) {}
"#;

/// How the bare mailbox's GPU thread polls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MailboxPoll {
    /// The probe's: two volatile loads a poll, the request word then the stop word.
    Probe,
    /// One 16-byte acquire load a poll: the request seq, the argument and the stop word
    /// share one word pair.
    OneLoad,
}

/// Where a [`MailboxPoll`]'s words are in the shared line, bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MailboxLayout {
    /// Request sequence (client writes, u64).
    pub seq_req: usize,
    /// Done sequence (GPU writes, u64).
    pub seq_done: usize,
    /// Argument (client writes, i32).
    pub arg: usize,
    /// Result (GPU writes, i32): `arg + 1`.
    pub result: usize,
    /// Nonzero: the kernel exits (u32).
    pub stop: usize,
}

impl MailboxPoll {
    /// The offsets of its words (the CUDA source's `struct bpft_mb`, or its `mb + N`).
    pub fn layout(self) -> MailboxLayout {
        match self {
            MailboxPoll::Probe => MailboxLayout {
                seq_req: 0,
                seq_done: 8,
                arg: 16,
                result: 20,
                stop: 24,
            },
            MailboxPoll::OneLoad => MailboxLayout {
                seq_req: 32,
                arg: 40,
                stop: 44,
                result: 48,
                seq_done: 56,
            },
        }
    }

    /// Its name in benchmark output and in `BPFTIME_GPU_MAILBOX_POLL`.
    pub fn name(self) -> &'static str {
        match self {
            MailboxPoll::Probe => "probe",
            MailboxPoll::OneLoad => "one-load",
        }
    }
}

/// The bare mailbox kernel of `poll` as PTX for `sm` (NVRTC).
pub fn mailbox_ptx(poll: MailboxPoll, sm: u32) -> Result<String, DeviceError> {
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(if sm >= 90 { "compute_90" } else { "compute_80" }),
        ..Default::default()
    };
    let src = match poll {
        MailboxPoll::Probe => MAILBOX_CU.to_string(),
        MailboxPoll::OneLoad => format!("#define BPFT_MB_ONE_LOAD\n{MAILBOX_CU}"),
    };
    Ok(cudarc::nvrtc::compile_ptx_with_opts(src, opts)
        .map_err(|e| DeviceError::Call {
            call: "nvrtc",
            code: format!("{e:?}"),
            log: String::new(),
        })?
        .to_src())
}

/// A running bare mailbox kernel over a caller-owned shared mapping.
pub struct BareMailbox {
    gpu: Gpu,
    lib: Option<super::driver::Library>,
    stream: super::driver::Stream,
    host: *mut u8,
    poll: MailboxPoll,
}

impl BareMailbox {
    /// Registers `host` (a page-aligned shared mapping of at least 4096 bytes, zeroed, that
    /// outlives this value) and launches the polling kernel. Another process that maps the
    /// same file submits by writing plain memory (see [`MailboxPoll::layout`]).
    pub fn start(
        ordinal: i32,
        host: *mut u8,
        poll: MailboxPoll,
    ) -> Result<BareMailbox, DeviceError> {
        let gpu = Gpu::open(ordinal)?;
        let ptx = mailbox_ptx(poll, super::device_sm(ordinal)?)?;
        let cubin = gpu.link(&[("mailbox.ptx", &ptx)])?;
        let mut lib = gpu.load_library(&cubin)?;
        let stream = gpu.stream()?;
        let dev = gpu.register(host, 4096)?;
        #[repr(C)]
        struct Params {
            mb: u64,
        }
        gpu.launch_persistent(&mut lib, stream, 1, 32, &Params { mb: dev })?;
        Ok(BareMailbox {
            gpu,
            lib: Some(lib),
            stream,
            host,
            poll,
        })
    }

    /// Stops the kernel and releases the registration.
    pub fn stop(mut self) -> Result<(), DeviceError> {
        // SAFETY: `host` is the live mapping `start` registered; the stop word is an
        // aligned u32 inside its first 64 bytes.
        let stop = unsafe {
            &*(self.host.add(self.poll.layout().stop) as *const std::sync::atomic::AtomicU32)
        };
        stop.store(1, std::sync::atomic::Ordering::Release);
        self.gpu.sync(self.stream)?;
        self.gpu.unregister(self.host);
        if let Some(l) = self.lib.take() {
            self.gpu.unload(l);
        }
        Ok(())
    }
}

/// The client side of [`BareMailbox`]: `n` round trips (after `warm` unmeasured ones) over
/// `map` (the shared mapping, page-aligned, 4096 bytes or more), as the probe does them,
/// with the words where `poll`'s kernel reads them; returns the latencies in µs, or an error
/// when an answer is wrong or takes longer than two seconds.
pub fn mailbox_round_trips(
    map: &[u8],
    poll: MailboxPoll,
    warm: usize,
    n: usize,
) -> Result<Vec<f64>, String> {
    use std::sync::atomic::{AtomicI32, AtomicU64, Ordering, fence};
    if map.len() < 4096 || !(map.as_ptr() as usize).is_multiple_of(4096) {
        return Err("the mailbox mapping must be page-aligned and at least 4096 bytes".into());
    }
    let host = map.as_ptr();
    let l = poll.layout();
    // SAFETY: `map` is at least 4096 bytes and page-aligned (checked), so every word is in
    // bounds (the layouts' words lie in its first 64 bytes) and naturally aligned; the GPU
    // and the other process change them, so they are accessed only through atomics
    // (interior mutability, no `&mut` aliasing).
    let (req, done, arg, res) = unsafe {
        (
            &*(host.add(l.seq_req) as *const AtomicU64),
            &*(host.add(l.seq_done) as *const AtomicU64),
            &*(host.add(l.arg) as *const AtomicI32),
            &*(host.add(l.result) as *const AtomicI32),
        )
    };
    let start = done.load(Ordering::Acquire);
    let mut out = Vec::with_capacity(n);
    for i in 1..=(warm + n) as u64 {
        let seq = start + i;
        let t = Instant::now();
        arg.store(seq as i32, Ordering::Relaxed);
        // ORDERING: the argument is visible before the request (the probe's seq_cst fence).
        fence(Ordering::SeqCst);
        req.store(seq, Ordering::Relaxed);
        // The clock is read once in 4,096 spins: a read (tens of ns) in every spin would
        // delay seeing the answer, which the persistent row's wait does not.
        let mut spins = 0u32;
        while done.load(Ordering::Acquire) != seq {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) && t.elapsed().as_secs() >= 2 {
                return Err(format!("round trip {i}: no answer in 2 s"));
            }
            std::hint::spin_loop();
        }
        let el = t.elapsed().as_secs_f64() * 1e6;
        if res.load(Ordering::Relaxed) != (seq as i32).wrapping_add(1) {
            return Err(format!("round trip {i}: wrong answer"));
        }
        if i as usize > warm {
            out.push(el);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};

    /// The probe kernel's `struct bpft_mb`, as the CUDA source declares it.
    #[repr(C)]
    struct ProbeLine {
        seq_req: u64,
        seq_done: u64,
        arg: i32,
        result: i32,
        stop: i32,
    }

    /// The offsets the CUDA source itself uses: the probe's struct fields (its declaration
    /// is checked to be the mirror's), the one-load kernel's `mb + N` addresses in order
    /// (the poll, the result, the done word).
    fn source_layout(poll: MailboxPoll) -> MailboxLayout {
        match poll {
            MailboxPoll::Probe => {
                assert!(MAILBOX_CU.contains(
                    "volatile unsigned long long seq_req, seq_done;\n    volatile int arg, result;\n    volatile int stop;"
                ));
                MailboxLayout {
                    seq_req: std::mem::offset_of!(ProbeLine, seq_req),
                    seq_done: std::mem::offset_of!(ProbeLine, seq_done),
                    arg: std::mem::offset_of!(ProbeLine, arg),
                    result: std::mem::offset_of!(ProbeLine, result),
                    stop: std::mem::offset_of!(ProbeLine, stop),
                }
            }
            MailboxPoll::OneLoad => {
                let body = &MAILBOX_CU[..MAILBOX_CU.find("#else").unwrap()];
                let at: Vec<usize> = body
                    .split("(mb + ")
                    .skip(1)
                    .map(|s| s[..s.find(')').unwrap()].parse().unwrap())
                    .collect();
                assert_eq!(at.len(), 3, "{body}");
                // The poll's second word: the argument in its low half, stop in its high.
                assert!(
                    body.contains("(int)(unsigned)w + 1") && body.contains("if (w >> 32) return;")
                );
                MailboxLayout {
                    seq_req: at[0],
                    arg: at[0] + 8,
                    stop: at[0] + 12,
                    result: at[1],
                    seq_done: at[2],
                }
            }
        }
    }

    /// A page-aligned, zeroed 4096-byte line shared with the responder thread.
    struct Page(*mut u8);
    // SAFETY: the page is only accessed through atomics.
    unsafe impl Send for Page {}
    // SAFETY: as for Send.
    unsafe impl Sync for Page {}
    impl Page {
        fn new() -> Page {
            let l = std::alloc::Layout::from_size_align(4096, 4096).unwrap();
            // SAFETY: a non-zero size.
            Page(unsafe { std::alloc::alloc_zeroed(l) })
        }
        fn u64(&self, off: usize) -> &AtomicU64 {
            // SAFETY: in bounds and 8-aligned (the layouts' offsets).
            unsafe { &*(self.0.add(off) as *const AtomicU64) }
        }
        fn i32(&self, off: usize) -> &AtomicI32 {
            // SAFETY: in bounds and 4-aligned.
            unsafe { &*(self.0.add(off) as *const AtomicI32) }
        }
        fn u32(&self, off: usize) -> &AtomicU32 {
            // SAFETY: in bounds and 4-aligned.
            unsafe { &*(self.0.add(off) as *const AtomicU32) }
        }
        fn bytes(&self) -> &[u8] {
            // SAFETY: 4096 bytes of ours; the client reads them through atomics only.
            unsafe { std::slice::from_raw_parts(self.0, 4096) }
        }
    }
    impl Drop for Page {
        fn drop(&mut self) {
            // SAFETY: allocated in `new` with this layout.
            unsafe {
                std::alloc::dealloc(
                    self.0,
                    std::alloc::Layout::from_size_align(4096, 4096).unwrap(),
                )
            }
        }
    }

    /// Runs the client against a thread that answers as `poll`'s kernel does, at the
    /// source's offsets, with `arg + add`.
    fn run(poll: MailboxPoll, add: i32) -> Result<Vec<f64>, String> {
        let page = std::sync::Arc::new(Page::new());
        let l = source_layout(poll);
        let quit = std::sync::Arc::new(AtomicBool::new(false));
        let gpu = {
            let (page, quit) = (page.clone(), quit.clone());
            std::thread::spawn(move || {
                let mut last = 0;
                while !quit.load(Ordering::Relaxed) && page.u32(l.stop).load(Ordering::Acquire) == 0
                {
                    let s = page.u64(l.seq_req).load(Ordering::Acquire);
                    if s == last {
                        std::hint::spin_loop();
                        continue;
                    }
                    last = s;
                    let a = page.i32(l.arg).load(Ordering::Relaxed);
                    page.i32(l.result)
                        .store(a.wrapping_add(add), Ordering::Relaxed);
                    page.u64(l.seq_done).store(s, Ordering::Release);
                }
            })
        };
        let r = mailbox_round_trips(page.bytes(), poll, 10, 200);
        quit.store(true, Ordering::Relaxed);
        gpu.join().unwrap();
        r
    }

    #[test]
    fn the_client_talks_to_both_kernels_where_their_source_reads_and_writes() {
        for poll in [MailboxPoll::Probe, MailboxPoll::OneLoad] {
            let l = poll.layout();
            let s = source_layout(poll);
            assert_eq!(l, s, "{poll:?}");
            let v = run(poll, 1).unwrap_or_else(|e| panic!("{poll:?}: {e}"));
            assert_eq!(v.len(), 200, "{poll:?}");
            assert!(v.iter().all(|us| *us > 0.0), "{poll:?}");
        }
    }

    #[test]
    fn a_wrong_answer_is_an_error() {
        for poll in [MailboxPoll::Probe, MailboxPoll::OneLoad] {
            let e = run(poll, 2).unwrap_err();
            assert!(e.contains("wrong answer"), "{poll:?}: {e}");
        }
    }
}
