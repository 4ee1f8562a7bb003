"""What accelerate keeps on the CPU and copies in at each forward, for the offload examples:
the bytes of the parameters the device map puts on the CPU, and a names file for
`llm-cache observe --names` (host_addr,bytes,name of each CPU tensor accelerate's hooks hold
in their weights maps)."""


def offloaded_bytes(model, dmap):
    """Bytes of the parameters of the modules `dmap` places on the CPU."""
    cpu = {n for n, d in dmap.items() if d == "cpu"}
    return sum(p.numel() * p.element_size() for n, p in model.named_parameters()
               if any(n == m or n.startswith(m + ".") for m in cpu))


def write_names(model, path):
    """Writes the names file; returns (tensors, bytes) of what it names."""
    rows, seen = [], set()
    for mod_name, module in model.named_modules():
        hook = getattr(module, "_hf_hook", None)
        wm = getattr(hook, "weights_map", None) if hook is not None else None
        if not getattr(hook, "offload", False) or wm is None:
            continue
        for pname, _ in module.named_parameters(recurse=False):
            try:
                t = wm[pname]
            except KeyError:
                continue
            key = (t.data_ptr(), t.numel() * t.element_size())
            if key not in seen:
                seen.add(key)
                rows.append((key[0], key[1], f"{mod_name}.{pname}"))
    with open(path, "w") as f:
        f.write("host_addr,bytes,name\n")
        for addr, nbytes, n in rows:
            f.write(f"{addr:#x},{nbytes},{n}\n")
    return len(rows), sum(r[1] for r in rows)
