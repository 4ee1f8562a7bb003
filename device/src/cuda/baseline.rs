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
