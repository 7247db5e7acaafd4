"""Probe machinery test program: two ranks under torchrun (gloo, on the CPU),
each putting a rank-sized block in place, then a DDP step together."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
block = torch.ones(1024 * (rank + 1), 256)  # probe: MEM001
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
model(torch.ones(4, 8)).sum().backward()
print("rank", rank, "done")
dist.destroy_process_group()
