"""A DDP job of two ranks that selects its GPUs correctly (set_device,
device_ids) and still puts memory on GPU 0 from rank 1: it resumes with
torch.load and no map_location from a checkpoint rank 0 saved from cuda:0,
so every rank restores a copy there (MEM007), and one is kept. The near miss,
a load mapped to the rank's own GPU, puts nothing on GPU 0."""
import os
import tempfile
import time

import torch
import torch.distributed as dist
from torch import nn

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
path = os.path.join(tempfile.gettempdir(), "memlint_ddp_two_gpus.pt")
if dist.get_rank() == 0:
    torch.save(nn.Linear(4096, 4096).cuda().state_dict(), path)  # saved from cuda:0
dist.barrier()
model = nn.Linear(4096, 4096).cuda()
model.load_state_dict(torch.load(path))
kept = torch.load(path)
mapped = torch.load(path, map_location=f"cuda:{local_rank}")
ddp = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
ddp(torch.ones(8, 4096, device=f"cuda:{local_rank}")).sum().backward()
time.sleep(4)  # a plateau, so that nvidia-smi's samples see what the account sees
dist.barrier()
dist.destroy_process_group()
