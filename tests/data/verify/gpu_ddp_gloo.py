"""GPU test program: two ranks under torchrun (gloo; on a one-GPU machine
both ranks share GPU 0), each putting a rank-sized block on its GPU, then a
DDP step together."""
import os

import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
device = torch.device("cuda", local_rank % torch.cuda.device_count())
torch.cuda.set_device(device)
dist.init_process_group("gloo")
rank = dist.get_rank()
block = torch.ones(1024 * (rank + 1), 4096, device=device)  # probe: MEM001
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8).to(device))
model(torch.ones(4, 8, device=device)).sum().backward()
print("rank", rank, "done on", device)
dist.destroy_process_group()
