"""The 1.1 B Llama of offload_llama.py, all on the GPU, generating with transformers'
offloaded KV cache (`cache_implementation="offloaded"`): each layer's keys and values live
in CPU memory between uses and are copied back for the layer's attention at every step.

Prints one line: `kv cache=CLASS prompt=P new=N layers=L kv_bytes_per_token=B tok_per_s=R`.
Run under `llm-cache observe` to see the cache's traffic as objects.
"""
import argparse
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--prompt", type=int, default=1024)
ap.add_argument("--tokens", type=int, default=32)
ap.add_argument("--layers", type=int, default=22)
a = ap.parse_args()

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
print(f"kv cache={type(out.past_key_values).__name__} prompt={a.prompt} new={new} layers={a.layers} "
      f"kv_bytes_per_token={kv_per_token} tok_per_s={new / dt:.3f}", flush=True)
