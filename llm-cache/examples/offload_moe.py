"""A Mixtral-style mixture-of-experts decoder (random weights) with accelerate CPU offload,
whose router is skewed: a fixed bias of log Zipf(1.2) over the experts is added to the
router's logits before it picks its top k, so a few experts take most tokens. Writes NAMES
for `observe --names` (the offloaded tensors, as offload_llama.py does) and prints one line:
  moe experts=E top_k=K layers=L params=N offloaded_bytes=B tokens=T tok_per_s=R routed=[...]
where routed counts the tokens each expert got (summed over layers), as the router picked
them.

transformers 5 keeps a layer's experts in one fused tensor, which accelerate moves whole
whenever the layer runs, so the traffic shows no popularity. With --per-expert each expert
becomes a module of its own (its slices of the fused weights), the experts alone are
offloaded, and a layer calls only the experts its tokens were routed to: accelerate moves
exactly those, so popular experts move often and the others rarely or never (the way
transformers 4 ran Mixtral)."""
import argparse
import time
import types

import torch
import torch.nn.functional as F
from torch import nn
from accelerate import dispatch_model, infer_auto_device_map
from transformers import MixtralConfig, MixtralForCausalLM

from offload_names import offloaded_bytes, write_names

ap = argparse.ArgumentParser()
ap.add_argument("names")
ap.add_argument("--gpu-budget", default="512MiB")
ap.add_argument("--tokens", type=int, default=16)
ap.add_argument("--per-expert", action="store_true",
                help="one module per expert, only the experts offloaded (see the docstring)")
a = ap.parse_args()


class Expert(nn.Module):
    """One expert: its slices of the fused gate_up and down projections."""

    def __init__(self, gate_up, down):
        super().__init__()
        self.gate_up = nn.Parameter(gate_up.detach().clone())
        self.down = nn.Parameter(down.detach().clone())

    def forward(self, x):
        gate, up = F.linear(x, self.gate_up).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, self.down)


class PerExpert(nn.Module):
    """MixtralExperts' computation, calling only the experts with routed tokens."""

    def __init__(self, fused):
        super().__init__()
        self.num_experts = fused.num_experts
        self.experts = nn.ModuleList(
            Expert(fused.gate_up_proj[e], fused.down_proj[e]) for e in range(fused.num_experts))

    def forward(self, hidden_states, top_k_index, top_k_weights):
        out = torch.zeros_like(hidden_states)
        mask = F.one_hot(top_k_index, num_classes=self.num_experts).permute(2, 1, 0)
        for e in torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero().flatten().tolist():
            pos, tok = torch.where(mask[e])
            y = self.experts[e](hidden_states[tok]) * top_k_weights[tok, pos, None]
            out.index_add_(0, tok, y.to(out.dtype))
        return out


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


def skewed_router(self, hidden_states, _b=bias):
    """MixtralTopKRouter.forward with the bias added before the top k (a forward hook on
    its output would change the logits it returns, not the experts it picked)."""
    hidden_states = hidden_states.reshape(-1, self.hidden_dim)
    logits = F.linear(hidden_states, self.weight) + _b.to(hidden_states.device, hidden_states.dtype)
    probs = torch.softmax(logits.float(), dim=-1)
    top_v, top_i = torch.topk(probs, self.top_k, dim=-1)
    top_v /= top_v.sum(dim=-1, keepdim=True)
    routed.add_(torch.bincount(top_i.flatten().cpu(), minlength=E))
    return logits, top_v, top_i


moe_blocks = [m for n, m in model.named_modules() if n.endswith(".mlp") and hasattr(m, "gate")]
gates = [b.gate for b in moe_blocks]
for g in gates:
    assert g.top_k == K and hasattr(g, "weight"), "unexpected router (transformers changed)"
    g.forward = types.MethodType(skewed_router, g)
if a.per_expert:
    for b in moe_blocks:
        b.experts = PerExpert(b.experts)
    params = sum(p.numel() for p in model.parameters())
    # Every module holding parameters or buffers on the GPU, the experts on the CPU.
    dmap = {}
    for name, mod in model.named_modules():
        if name and (next(mod.parameters(recurse=False), None) is not None
                     or next(mod.buffers(recurse=False), None) is not None):
            dmap[name] = "cpu" if isinstance(mod, Expert) else 0
else:
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
print(f"moe per_expert={int(a.per_expert)} experts={E} top_k={K} layers={cfg.num_hidden_layers} params={params} "
      f"offloaded_tensors={ntensors} offloaded_bytes={expected} gates={len(gates)} tokens={new} "
      f"tok_per_s={new / dt:.3f} routed={routed.tolist()}", flush=True)
