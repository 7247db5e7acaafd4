"""Which torch.cuda calls create a CUDA context, each in a fresh process:
prints `<call> <context on cuda:0 after it>` (torch._C._cuda_hasPrimaryContext)."""

import subprocess
import sys

CALLS = ["torch.cuda.empty_cache()", "torch.cuda.manual_seed(0)",
         "torch.cuda.memory_allocated()", "torch.cuda.current_device()",
         "torch.cuda.get_device_properties(0)", "torch.cuda.synchronize()",
         "torch.cuda.mem_get_info()", "torch.cuda.Stream()", "torch.zeros(1, device='cuda')"]

for call in CALLS:
    code = f"import torch\n{call}\nprint(bool(torch._C._cuda_hasPrimaryContext(0)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    print(f"{call:40s} context: {out.stdout.strip() or out.stderr.strip()[-200:]}")
