"""A decoder-only model of about 1.1 B parameters (Llama architecture, random weights: the
GPU machine has no downloads) generating tokens with accelerate's CPU offload: the GPU
budget (--gpu-budget, default 1 GiB) is smaller than the model, so the layers that do not
fit stay in CPU memory and accelerate copies their weights to the GPU at every forward.

Writes NAMES (CSV host_addr,bytes,name of every offloaded tensor, for `llm-cache observe
--names`) and prints one line, in which expected_h2d = resident_bytes (the GPU-resident
parameters, copied once by dispatch_model) + offloaded_bytes x forwards (all fp16):
  offload params=N ... offloaded_bytes=B resident_bytes=R forwards=F expected_h2d=R+B*F tok_per_s=T

Run:  bpftime-super llm-cache observe --names names.csv -o llama.trace -- \
          python3 llm-cache/examples/offload_llama.py names.csv

With --toggle-pairs N (under `observe`, whose shim exports `bpftime_host_probes_pause`):
after that line and an untimed generation in each state, N pairs of generations of --tokens tokens each, one with the observer
recording and one with it paused, the order alternating from pair to pair, in this one process;
prints a JSON line with each generation's tokens/s and the ratio recording / paused.
"""
import argparse
import time

import torch
from accelerate import dispatch_model, infer_auto_device_map
from transformers import LlamaConfig, LlamaForCausalLM

from offload_names import offloaded_bytes, write_names

ap = argparse.ArgumentParser()
ap.add_argument("names")
ap.add_argument("--gpu-budget", default="1GiB")
ap.add_argument("--tokens", type=int, default=8)
ap.add_argument("--layers", type=int, default=22)
ap.add_argument("--toggle-pairs", type=int, default=0)
a = ap.parse_args()

torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=a.layers,
                  num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                  max_position_embeddings=2048, torch_dtype="float16")
torch.set_default_dtype(torch.float16)
with torch.device("cpu"):
    model = LlamaForCausalLM(cfg).eval()
params = sum(p.numel() for p in model.parameters())
dmap = infer_auto_device_map(model, max_memory={0: a.gpu_budget, "cpu": "64GiB"},
                             no_split_module_classes=["LlamaDecoderLayer"])
model = dispatch_model(model, device_map=dmap, main_device=0)

# What accelerate keeps on the CPU and copies in at each forward.
offloaded = {n for n, d in dmap.items() if d == "cpu"}
expected = offloaded_bytes(model, dmap)
ntensors, total = write_names(model, a.names)

forwards = 0
def count(_m, _i):
    global forwards
    forwards += 1
model.model.embed_tokens.register_forward_pre_hook(count)
ids = torch.randint(0, cfg.vocab_size, (1, 16), device="cuda:0")
torch.cuda.synchronize()
t0 = time.time()
out = model.generate(ids, max_new_tokens=a.tokens, min_new_tokens=a.tokens, do_sample=False)
torch.cuda.synchronize()
dt = time.time() - t0
new = out.shape[1] - ids.shape[1]
# Parameters that live on the GPU were copied there once, by dispatch_model.
resident = params * 2 - expected
print(f"offload params={params} offloaded_tensors={ntensors} named_bytes={total} offloaded_bytes={expected} "
      f"resident_bytes={resident} forwards={forwards} expected_h2d={resident + expected * forwards} "
      f"tokens={new} tok_per_s={new / dt:.3f} "
      f"gpu_layers={sum(1 for d in dmap.values() if d == 0)} cpu_modules={len(offloaded)}", flush=True)

if a.toggle_pairs:
    import ctypes, json, random, statistics
    try:
        pause = ctypes.CDLL(None).bpftime_host_probes_pause
    except AttributeError:
        raise SystemExit("--toggle-pairs needs the observer's shim (bpftime_host_probes_pause)")
    pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
    # Untimed warm-up: one generation recording and one paused, so that the first timed
    # pairs pay no one-time cost (the log file's first pages, first-call reports).
    for w in (0, 1):
        pause(w)
        model.generate(ids, max_new_tokens=a.tokens, min_new_tokens=a.tokens, do_sample=False)
    rows = []
    for p in range(a.toggle_pairs):
        rate = {}
        # Recording first in even pairs, second in odd ones: the second generation of a pair
        # runs about 1% slower, whichever it is, so the orders must balance.
        for on in ((True, False) if p % 2 == 0 else (False, True)):
            pause(0 if on else 1)
            torch.cuda.synchronize()
            t0 = time.time()
            out = model.generate(ids, max_new_tokens=a.tokens, min_new_tokens=a.tokens, do_sample=False)
            torch.cuda.synchronize()
            rate["on" if on else "off"] = (out.shape[1] - ids.shape[1]) / (time.time() - t0)
        rows.append({"pair": p, "on_tok_s": rate["on"], "off_tok_s": rate["off"], "ratio": rate["on"] / rate["off"]})
    pause(0)
    r = sorted(x["ratio"] for x in rows)
    boot = random.Random(1)
    meds = sorted(statistics.median(boot.choices(r, k=len(r))) for _ in range(10000))
    print(json.dumps({"toggle_pairs": a.toggle_pairs, "tokens_per_generation": a.tokens, "rows": rows,
                      "ratio_median": statistics.median(r), "ratio_ci95": [meds[250], meds[9750]]}), flush=True)
