"""A Mixtral-style mixture-of-experts decoder (random weights) with accelerate CPU offload,
whose router is skewed: a fixed bias of log Zipf(1.2) over the experts is added to the
router's logits, so a few experts take most tokens. Writes NAMES for `observe --names` (the
offloaded tensors, as offload_llama.py does) and prints one line:
  moe experts=E top_k=K layers=L params=N offloaded_bytes=B tokens=T tok_per_s=R routed=[...]
where routed counts the tokens each expert got (summed over layers)."""
import argparse
import time

import torch
from accelerate import dispatch_model, infer_auto_device_map
from transformers import MixtralConfig, MixtralForCausalLM

from offload_names import offloaded_bytes, write_names

ap = argparse.ArgumentParser()
ap.add_argument("names")
ap.add_argument("--gpu-budget", default="512MiB")
ap.add_argument("--tokens", type=int, default=16)
a = ap.parse_args()

torch.manual_seed(0)
E, K = 8, 2
cfg = MixtralConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                    num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                    num_local_experts=E, num_experts_per_tok=K, max_position_embeddings=2048,
                    torch_dtype="float16")
torch.set_default_dtype(torch.float16)
with torch.device("cpu"):
    model = MixtralForCausalLM(cfg).eval()
params = sum(p.numel() for p in model.parameters())
bias = torch.log(torch.tensor([1.0 / (i + 1) ** 1.2 for i in range(E)])) * 4
routed = torch.zeros(E, dtype=torch.long)
gates = [m for n, m in model.named_modules() if n.endswith("mlp.gate") or n.endswith("block_sparse_moe.gate")]
for g in gates:
    def hook(_m, _i, out, _b=bias):
        logits = out[0] if isinstance(out, tuple) else out
        logits = logits + _b.to(logits.device, logits.dtype)
        routed.add_(torch.bincount(logits.topk(K, dim=-1).indices.flatten().cpu(), minlength=E))
        return (logits,) + tuple(out[1:]) if isinstance(out, tuple) else logits
    g.register_forward_hook(hook)
dmap = infer_auto_device_map(model, max_memory={0: a.gpu_budget, "cpu": "64GiB"},
                             no_split_module_classes=["MixtralDecoderLayer"])
model = dispatch_model(model, device_map=dmap, main_device=0)
expected = offloaded_bytes(model, dmap)
ntensors, _ = write_names(model, a.names)
ids = torch.randint(0, cfg.vocab_size, (1, 16), device="cuda:0")
torch.cuda.synchronize()
t0 = time.time()
out = model.generate(ids, max_new_tokens=a.tokens, min_new_tokens=a.tokens, do_sample=False)
torch.cuda.synchronize()
dt = time.time() - t0
new = out.shape[1] - ids.shape[1]
print(f"moe experts={E} top_k={K} layers={cfg.num_hidden_layers} params={params} "
      f"offloaded_tensors={ntensors} offloaded_bytes={expected} gates={len(gates)} tokens={new} "
      f"tok_per_s={new / dt:.3f} routed={routed.tolist()}", flush=True)
