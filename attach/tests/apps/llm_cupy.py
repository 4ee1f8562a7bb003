"""llm_cupy: a small decoder-only transformer's inference loop written as CuPy RawKernels
(NVRTC-compiled PTX, loaded through the driver API), for the memory-probe checks against
Nsight Compute on a real program (attach/tests/gpu/mem.py).

Per decoded token and layer: RMS norm, Q/K/V projections (a tiled matrix-vector kernel),
appending K and V to the KV cache, attention over the cache (scores, softmax, weighted sum
of V), the output projection, and a gated MLP (two projections, SiLU gate, down
projection); then the final norm and the logits. Greedy decoding, fixed weights.
Output: `llm layers=L d=D steps=S launches=N tokens=[...] checksum=C ok`."""
import sys
import cupy as cp

SRC = r'''
extern "C" __global__ void rmsnorm(const float* x, const float* w, float* y, int d) {
    __shared__ float part[256];
    float s = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) s += x[i] * x[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    float r = rsqrtf(part[0] / d + 1e-5f);
    for (int i = threadIdx.x; i < d; i += blockDim.x) y[i] = x[i] * r * w[i];
}

// y[r] = sum_c W[r * cols + c] * x[c]: one warp per row, lanes stride the row.
extern "C" __global__ void matvec(const float* W, const float* x, float* y, int rows, int cols) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    float s = 0.f;
    for (int c = lane; c < cols; c += 32) s += W[(size_t)row * cols + c] * x[c];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffff, s, o);
    if (lane == 0) y[row] = s;
}

extern "C" __global__ void append_kv(const float* k, const float* v, float* kc, float* vc, int pos, int d) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < d) { kc[(size_t)pos * d + i] = k[i]; vc[(size_t)pos * d + i] = v[i]; }
}

// One block per head: scores over positions 0..t, softmax, then the weighted sum of V.
extern "C" __global__ void attention(const float* q, const float* kc, const float* vc, float* out,
                                     int t, int d, int hd) {
    __shared__ float sc[1024];
    __shared__ float red[256];
    int h = blockIdx.x;
    for (int p = threadIdx.x; p <= t; p += blockDim.x) {
        float s = 0.f;
        for (int i = 0; i < hd; i++) s += q[h * hd + i] * kc[(size_t)p * d + h * hd + i];
        sc[p] = s * rsqrtf((float)hd);
    }
    __syncthreads();
    float m = -1e30f;
    for (int p = threadIdx.x; p <= t; p += blockDim.x) m = fmaxf(m, sc[p]);
    red[threadIdx.x] = m;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + k]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float z = 0.f;
    for (int p = threadIdx.x; p <= t; p += blockDim.x) { sc[p] = __expf(sc[p] - m); z += sc[p]; }
    red[threadIdx.x] = z;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k];
        __syncthreads();
    }
    z = red[0];
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float s = 0.f;
        for (int p = 0; p <= t; p++) s += sc[p] * vc[(size_t)p * d + h * hd + i];
        out[h * hd + i] = s / z;
    }
}

extern "C" __global__ void silu_gate(const float* a, const float* b, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float g = a[i]; y[i] = g / (1.f + __expf(-g)) * b[i]; }
}

extern "C" __global__ void add_inplace(float* x, const float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

extern "C" __global__ void embed(const float* table, float* x, int token, int d) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < d) x[i] = table[(size_t)token * d + i];
}
'''

mod = cp.RawModule(code=SRC)
K = {n: mod.get_function(n) for n in
     ("rmsnorm", "matvec", "append_kv", "attention", "silu_gate", "add_inplace", "embed")}

layers = int(sys.argv[1]) if len(sys.argv) > 1 else 4
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 16
d, heads, ff, vocab = 512, 8, 1376, 4096
hd = d // heads
rng = cp.random.RandomState(1234)


def w(*shape, scale=0.05):
    return (rng.standard_normal(shape, dtype=cp.float32) * scale).astype(cp.float32)


emb = w(vocab, d, scale=1.0)
L = [dict(n1=cp.ones(d, cp.float32), wq=w(d, d), wk=w(d, d), wv=w(d, d), wo=w(d, d),
          n2=cp.ones(d, cp.float32), w1=w(ff, d), w3=w(ff, d), w2=w(d, ff),
          kc=cp.zeros((steps, d), cp.float32), vc=cp.zeros((steps, d), cp.float32)) for _ in range(layers)]
nf = cp.ones(d, cp.float32)
wout = w(vocab, d)
x, h, q, k, v, a, o = (cp.zeros(d, cp.float32) for _ in range(7))
g1, g3, g = (cp.zeros(ff, cp.float32) for _ in range(3))
logits = cp.zeros(vocab, cp.float32)
launches = 0


def launch(name, grid, block, args):
    global launches
    K[name]((grid,), (block,), args)
    launches += 1


def mv(W, xin, y, rows, cols):
    launch("matvec", (rows + 7) // 8, 256, (W, xin, y, cp.int32(rows), cp.int32(cols)))


token, tokens = 1, []
i32 = cp.int32
for t in range(steps):
    launch("embed", (d + 255) // 256, 256, (emb, x, i32(token), i32(d)))
    for l in L:
        launch("rmsnorm", 1, 256, (x, l["n1"], h, i32(d)))
        mv(l["wq"], h, q, d, d)
        mv(l["wk"], h, k, d, d)
        mv(l["wv"], h, v, d, d)
        launch("append_kv", (d + 255) // 256, 256, (k, v, l["kc"], l["vc"], i32(t), i32(d)))
        launch("attention", heads, 256, (q, l["kc"], l["vc"], a, i32(t), i32(d), i32(hd)))
        mv(l["wo"], a, o, d, d)
        launch("add_inplace", (d + 255) // 256, 256, (x, o, i32(d)))
        launch("rmsnorm", 1, 256, (x, l["n2"], h, i32(d)))
        mv(l["w1"], h, g1, ff, d)
        mv(l["w3"], h, g3, ff, d)
        launch("silu_gate", (ff + 255) // 256, 256, (g1, g3, g, i32(ff)))
        mv(l["w2"], g, o, d, ff)
        launch("add_inplace", (d + 255) // 256, 256, (x, o, i32(d)))
    launch("rmsnorm", 1, 256, (x, nf, h, i32(d)))
    mv(wout, h, logits, vocab, d)
    token = int(cp.argmax(logits))
    tokens.append(token)
cp.cuda.Device().synchronize()
cs = float(cp.abs(logits).astype(cp.float64).sum())
print(f"llm layers={layers} d={d} steps={steps} launches={launches} tokens={tokens} checksum={cs:.6e} ok")
