#!/usr/bin/env bash
# Runs on the GPU machine (it has nvcc, cuobjdump, Numba, CuPy, Triton): builds the apps and
# writes the corpus of real images that CI tests parse and instrument without a GPU.
#   bash attach/tests/apps/build_corpus.sh OUTDIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out/nvcc" "$out/bin" "$out/numba" "$out/triton" "$out/cupy"
cd "$here"
nvcc --version > "$out/nvcc.version.txt"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv > "$out/gpu.txt" || true
for a in 75 80 90 100; do
  for k in vecadd sgemm graph coop; do
    nvcc -ptx -arch=compute_$a -o "$out/nvcc/${k}_sm$a.ptx" $k.cu
  done
done
nvcc -ptx -arch=compute_90 -lineinfo -o "$out/nvcc/vecadd_sm90_lineinfo.ptx" vecadd.cu
nvcc -ptx -arch=compute_90 -G -o "$out/nvcc/vecadd_sm90_debug.ptx" vecadd.cu
nvcc -cubin -arch=sm_90 -o "$out/bin/vecadd_sm90.cubin" vecadd.cu
nvcc -cubin -arch=sm_80 -o "$out/bin/sgemm_sm80.cubin" sgemm.cu
G="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
nvcc -fatbin $G -o "$out/bin/vecadd_multi.fatbin" vecadd.cu
nvcc -fatbin $G -Xfatbin -compress-all -o "$out/bin/vecadd_multi_compressed.fatbin" vecadd.cu
nvcc -fatbin -gencode arch=compute_90,code=sm_90 -o "$out/bin/vecadd_sass_only.fatbin" vecadd.cu
nvcc -fatbin -gencode arch=compute_75,code=compute_75 -o "$out/bin/sgemm_ptx_only.fatbin" sgemm.cu
for f in "$out"/bin/*.fatbin "$out"/bin/*.cubin; do cuobjdump --list-elf --list-ptx "$f" > "$f.cuobjdump.txt" 2>&1 || true; done
# Apps (kept out of the committed corpus except one static and one shared-cudart build).
mkdir -p "$out/apps"
for k in vecadd sgemm graph coop; do nvcc -O2 $G -o "$out/apps/$k" $k.cu; done
nvcc -O2 $G -cudart shared -o "$out/apps/vecadd_shared" vecadd.cu
nvcc -O2 -arch=sm_90 -o "$out/apps/driver_api" driver_api.cu -lcuda
cp "$out/apps/vecadd" "$out/bin/vecadd_static.exe"; cp "$out/apps/vecadd_shared" "$out/bin/vecadd_shared.exe"
cuobjdump --list-elf --list-ptx "$out/bin/vecadd_static.exe" > "$out/bin/vecadd_static.exe.cuobjdump.txt" 2>&1 || true
# Python JITs.
python3 corpus_py.py "$out" || echo "python corpus failed"
ls -laR "$out" | head -80
# Research: which driver entry points do cudart (static and shared), Numba, CuPy and PyTorch resolve?
gcc -shared -fPIC -O2 -o "$out/proclog.so" proclog.c -ldl
mkdir -p "$out/proclog"
cp "$out/nvcc/vecadd_sm90.ptx" /tmp/vecadd.ptx
for a in vecadd vecadd_shared graph coop; do LD_PRELOAD="$out/proclog.so" "$out/apps/$a" > "$out/proclog/$a.stdout" 2> "$out/proclog/$a.log" || echo "$a failed"; done
LD_PRELOAD="$out/proclog.so" "$out/apps/driver_api" /tmp/vecadd.ptx "$out/bin/vecadd_multi.fatbin" > "$out/proclog/driver_api.stdout" 2> "$out/proclog/driver_api.log" || echo "driver_api failed"
LD_PRELOAD="$out/proclog.so" python3 numba_app.py > "$out/proclog/numba.stdout" 2> "$out/proclog/numba.log" || echo numba failed
LD_PRELOAD="$out/proclog.so" python3 cupy_app.py > "$out/proclog/cupy.stdout" 2> "$out/proclog/cupy.log" || echo cupy failed
LD_PRELOAD="$out/proclog.so" python3 torch_app.py > "$out/proclog/torch.stdout" 2> "$out/proclog/torch.log" || echo torch failed
for f in "$out"/proclog/*.stdout; do echo "== $f"; cat "$f"; done
for f in "$out"/proclog/*.log; do echo "== $f: $(grep -c proclog "$f") lines; launch/module/library/graph names:"; grep -oE '(cuGetProcAddress[_v2]* |dlsym )(cu(Launch|Module|Library|Link|Graph|Kernel|Func|GetProcAddress|Init)[A-Za-z_0-9]*)[^>]*' "$f" | sort | uniq -c | sort -rn | head -60; done
tar -C "$out" -czf "$out/../corpus.tgz" nvcc bin numba triton cupy proclog nvcc.version.txt gpu.txt
ls -la "$out/../corpus.tgz"
