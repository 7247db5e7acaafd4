"""GPU program for `verify --nproc-per-node 2`: every rank resumes from a
checkpoint saved from cuda:0 with torch.load and no map_location, so every
rank puts a copy of it on cuda:0 whatever GPU it trains on."""
import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn

local_rank = int(os.environ["LOCAL_RANK"])
device = torch.device("cuda", local_rank % torch.cuda.device_count())
torch.cuda.set_device(device)
dist.init_process_group("gloo")
path = os.path.join(tempfile.gettempdir(), "memlint_ddp_checkpoint.pt")
if dist.get_rank() == 0:
    torch.save(nn.Linear(2048, 2048).to("cuda:0").state_dict(), path)
dist.barrier()
model = nn.Linear(2048, 2048).to(device)
model.load_state_dict(torch.load(path))
model = nn.parallel.DistributedDataParallel(model)
model(torch.ones(4, 2048, device=device)).sum().backward()
dist.destroy_process_group()
