"""The 1.1 B Llama of offload_llama.py, all on the GPU, generating with transformers'
offloaded KV cache (`cache_implementation="offloaded"`): each layer's keys and values live
in CPU memory between uses and are copied back for the layer's attention at every step.

Prints one line: `kv cache=CLASS prompt=P new=N layers=L kv_bytes_per_token=B tok_per_s=R
named_offloads=K`. Run under `llm-cache observe` to see the cache's traffic as objects.

With `--names FILE` it is also the framework hook: it wraps the cache's `offload(layer)` and
writes one timed row per offloaded tensor (`host_addr,bytes,from_ns,name`, `from_ns` on
CLOCK_MONOTONIC taken just before the offload), so `observe --names FILE` sees each layer's
keys and values as one object however often their host buffer changes.
"""
import argparse
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--prompt", type=int, default=1024)
ap.add_argument("--tokens", type=int, default=32)
ap.add_argument("--layers", type=int, default=22)
ap.add_argument("--names", help="write the KV blocks' timed names here (for observe --names)")
a = ap.parse_args()

rows = []
if a.names:
    from transformers.cache_utils import Cache

    plain_offload = Cache.offload

    def offload(self, layer_idx, *args, **kwargs):
        # Taken before the device->host copies start, so they carry the new name already.
        t = time.monotonic_ns()
        plain_offload(self, layer_idx, *args, **kwargs)
        layer = self.layers[layer_idx]
        for kind in ("keys", "values"):
            x = getattr(layer, kind, None)
            if isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.numel() > 0:
                rows.append((x.data_ptr(), x.numel() * x.element_size(), t,
                             f"model.layers.{layer_idx}.kv.{kind}"))

    Cache.offload = offload

torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=a.layers,
                  num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                  max_position_embeddings=4096, torch_dtype="float16")
torch.set_default_dtype(torch.float16)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).eval()
ids = torch.randint(0, cfg.vocab_size, (1, a.prompt), device="cuda")
torch.cuda.synchronize()
t0 = time.time()
out = model.generate(ids, max_new_tokens=a.tokens, min_new_tokens=a.tokens, do_sample=False,
                     cache_implementation="offloaded", return_dict_in_generate=True)
torch.cuda.synchronize()
dt = time.time() - t0
new = out.sequences.shape[1] - ids.shape[1]
kv_per_token = 2 * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads) * 2 * a.layers
if a.names:
    with open(a.names, "w") as f:
        f.write("host_addr,bytes,from_ns,name\n")
        for addr, nbytes, t, name in rows:
            f.write(f"{addr:#x},{nbytes},{t},{name}\n")
print(f"kv cache={type(out.past_key_values).__name__} prompt={a.prompt} new={new} layers={a.layers} "
      f"kv_bytes_per_token={kv_per_token} tok_per_s={new / dt:.3f} named_offloads={len(rows)}", flush=True)
