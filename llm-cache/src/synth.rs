//! Synthetic traces, deterministic from a seed: Zipf lookup sequences for tests and the
//! benchmark, and a small LLM-offload-shaped trace for `tests/data/`.
//!
//! Nothing here is measured: these traces only exercise the simulator. The random numbers
//! come from SplitMix64, so a seed gives the same trace on every machine.

use crate::trace::{Access, Direction, Trace};

/// SplitMix64: a tiny, fast, seedable generator (not for cryptography).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// Draws ranks `0..n` with probability ∝ `1 / (rank + 1)^exponent` (rank 0 most likely).
#[derive(Debug, Clone)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// The distribution over `n > 0` ranks.
    pub fn new(n: usize, exponent: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for k in 0..n {
            acc += 1.0 / ((k + 1) as f64).powf(exponent);
            cdf.push(acc);
        }
        for c in &mut cdf {
            *c /= acc;
        }
        Zipf { cdf }
    }

    /// One draw.
    pub fn sample(&self, rng: &mut Rng) -> u32 {
        let u = rng.unit();
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1) as u32
    }
}

/// `accesses` Zipf-distributed lookups over `objects` ids.
pub fn zipf_sequence(objects: usize, accesses: usize, exponent: f64, seed: u64) -> Vec<u32> {
    let z = Zipf::new(objects, exponent);
    let mut rng = Rng::new(seed);
    (0..accesses).map(|_| z.sample(&mut rng)).collect()
}

/// Sizes between `min` and `max` bytes, log-uniform, one per object.
pub fn log_uniform_sizes(objects: usize, min: u64, max: u64, seed: u64) -> Vec<u64> {
    let mut rng = Rng::new(seed);
    let (lo, hi) = ((min.max(1) as f64).ln(), (max.max(min).max(1) as f64).ln());
    (0..objects)
        .map(|_| (lo + (hi - lo) * rng.unit()).exp().round() as u64)
        .collect()
}

/// A Zipf trace: host→device transfers only, 1 µs apart, objects named `obj<id>`.
pub fn zipf_trace(sizes: &[u64], accesses: usize, exponent: f64, seed: u64) -> Trace {
    let mut b = Trace::builder();
    for (i, &s) in sizes.iter().enumerate() {
        b.object(&format!("obj{i}"), s);
    }
    for (t, o) in zipf_sequence(sizes.len(), accesses, exponent, seed)
        .into_iter()
        .enumerate()
    {
        b.access(Access::new(
            t as u64 * 1000,
            o,
            sizes[o as usize],
            Direction::HostToDevice,
        ));
    }
    b.build().expect("every id is defined")
}

/// A small trace shaped like layer-by-layer weight streaming in an LLM offload framework
/// (synthetic: no framework ran). A 4-layer fp16 model with hidden size 1024 and a
/// vocabulary of 8192 decodes `tokens` tokens. The "framework" keeps the embedding and the
/// LM head on the GPU after their first transfer and streams each layer's four weight
/// tensors host→device for every token. Each layer's KV cache lives in 32 KiB blocks of 8
/// tokens on the host: when a block fills it is written back device→host, and every token
/// reads each earlier full block of its layer host→device. Transfers run at about 20 GB/s
/// (±10 %) and carry durations; compute gaps of 50 µs separate layers.
pub fn llm_offload_trace(tokens: usize, seed: u64) -> Trace {
    const LAYERS: usize = 4;
    const H: u64 = 1024;
    const VOCAB: u64 = 8192;
    const BLOCK_TOKENS: usize = 8;
    let mut rng = Rng::new(seed);
    let mut b = Trace::builder();
    let embed = b.object("embed_tokens.weight", VOCAB * H * 2);
    let head = b.object("lm_head.weight", VOCAB * H * 2);
    let tensors = [
        ("self_attn.qkv_proj.weight", 3 * H * H * 2),
        ("self_attn.o_proj.weight", H * H * 2),
        ("mlp.up_proj.weight", 4 * H * H * 2),
        ("mlp.down_proj.weight", 4 * H * H * 2),
    ];
    let layer: Vec<Vec<u32>> = (0..LAYERS)
        .map(|l| {
            tensors
                .iter()
                .map(|(n, s)| b.object(&format!("layers.{l}.{n}"), *s))
                .collect()
        })
        .collect();
    let block_bytes = BLOCK_TOKENS as u64 * H * 2 * 2;
    let mut now = 0u64;
    let mut xfer = |b: &mut crate::trace::TraceBuilder, now: &mut u64, o: u32, bytes: u64, dir| {
        // ~20 GB/s = 20 bytes per ns, ±10 %.
        let ns = (bytes as f64 / 20.0 * (0.9 + 0.2 * rng.unit())).round() as u64;
        b.access(Access::new(*now, o, bytes, dir).with_duration(ns));
        *now += ns;
    };
    for t in 0..tokens {
        if t == 0 {
            xfer(
                &mut b,
                &mut now,
                embed,
                VOCAB * H * 2,
                Direction::HostToDevice,
            );
        }
        for (l, ids) in layer.iter().enumerate() {
            for (&o, (_, s)) in ids.iter().zip(&tensors) {
                xfer(&mut b, &mut now, o, *s, Direction::HostToDevice);
            }
            for k in 0..t / BLOCK_TOKENS {
                let kv = b.object(&format!("kv.layer{l}.block{k}"), block_bytes);
                xfer(&mut b, &mut now, kv, block_bytes, Direction::HostToDevice);
            }
            if (t + 1) % BLOCK_TOKENS == 0 {
                let kv = b.object(
                    &format!("kv.layer{l}.block{}", t / BLOCK_TOKENS),
                    block_bytes,
                );
                xfer(&mut b, &mut now, kv, block_bytes, Direction::DeviceToHost);
            }
            now += 50_000;
        }
        if t == 0 {
            xfer(
                &mut b,
                &mut now,
                head,
                VOCAB * H * 2,
                Direction::HostToDevice,
            );
        }
    }
    b.build().expect("every id is defined")
}
