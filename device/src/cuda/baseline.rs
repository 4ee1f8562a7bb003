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
/// service is compared with it in the same run.
const MAILBOX_CU: &str = r#"
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
extern "C" __global__ void bpft_empty(unsigned long long *out, unsigned long long v) {}
"#;

/// Offsets in the bare mailbox's line: request seq, done seq, argument, result, stop.
pub mod mailbox {
    /// Request sequence (client writes).
    pub const SEQ_REQ: usize = 0;
    /// Done sequence (GPU writes).
    pub const SEQ_DONE: usize = 8;
    /// Argument (client writes, i32).
    pub const ARG: usize = 16;
    /// Result (GPU writes, i32): `arg + 1`.
    pub const RESULT: usize = 20;
    /// Nonzero: the kernel exits.
    pub const STOP: usize = 24;
}

/// A running bare mailbox kernel over a caller-owned shared mapping.
pub struct BareMailbox {
    gpu: Gpu,
    lib: Option<super::driver::Library>,
    stream: super::driver::Stream,
    host: *mut u8,
}

impl BareMailbox {
    /// Registers `host` (a page-aligned shared mapping of at least 4096 bytes, zeroed, that
    /// outlives this value) and launches the polling kernel. Another process that maps the
    /// same file submits by writing plain memory (see [`mailbox`]).
    pub fn start(ordinal: i32, host: *mut u8) -> Result<BareMailbox, DeviceError> {
        let gpu = Gpu::open(ordinal)?;
        let sm = super::device_sm(ordinal)?;
        let opts = cudarc::nvrtc::CompileOptions {
            arch: Some(if sm >= 90 { "compute_90" } else { "compute_80" }),
            ..Default::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(MAILBOX_CU, opts)
            .map_err(|e| DeviceError::Call {
                call: "nvrtc",
                code: format!("{e:?}"),
                log: String::new(),
            })?
            .to_src();
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
        })
    }

    /// Stops the kernel and releases the registration.
    pub fn stop(mut self) -> Result<(), DeviceError> {
        // SAFETY: `host` is the live mapping `start` registered; STOP is an aligned u32.
        let stop =
            unsafe { &*(self.host.add(mailbox::STOP) as *const std::sync::atomic::AtomicU32) };
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
/// `map` (the shared mapping, page-aligned, 4096 bytes or more), as the probe does them;
/// returns the latencies in µs, or an error when an answer is wrong or takes longer than
/// two seconds.
pub fn mailbox_round_trips(map: &[u8], warm: usize, n: usize) -> Result<Vec<f64>, String> {
    use std::sync::atomic::{AtomicI32, AtomicU64, Ordering, fence};
    if map.len() < 4096 || !(map.as_ptr() as usize).is_multiple_of(4096) {
        return Err("the mailbox mapping must be page-aligned and at least 4096 bytes".into());
    }
    let host = map.as_ptr();
    // SAFETY: `map` is at least 4096 bytes and page-aligned (checked), so every word is in
    // bounds and naturally aligned; the GPU and the other process change them, so they are
    // accessed only through atomics (interior mutability, no `&mut` aliasing).
    let (req, done, arg, res) = unsafe {
        (
            &*(host.add(mailbox::SEQ_REQ) as *const AtomicU64),
            &*(host.add(mailbox::SEQ_DONE) as *const AtomicU64),
            &*(host.add(mailbox::ARG) as *const AtomicI32),
            &*(host.add(mailbox::RESULT) as *const AtomicI32),
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
        while done.load(Ordering::Acquire) != seq {
            if t.elapsed().as_secs() >= 2 {
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
