"""A DDP job that resumes from a checkpoint rank 0 saved from its GPU, with
`torch.load` and no `map_location` in every rank (MEM007): each tensor comes
back on the device it was saved from, cuda:0, so rank 1 puts a whole copy of
the model (64 MiB) and a CUDA context on GPU 0 before moving it.

`torchrun --nproc-per-node 2 ddp_resume.py` (memlint verify --nproc-per-node 2)."""

import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    path = os.path.join(tempfile.gettempdir(), "memlint_ddp_resume.pt")
    model = nn.Linear(4096, 4096).cuda()
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), path)  # tensors saved from cuda:0
    dist.barrier()
    state = torch.load(path)
    model.load_state_dict(state)
    ddp = DistributedDataParallel(model, device_ids=[local_rank])
    ddp(torch.randn(64, 4096, device=f"cuda:{local_rank}")).sum().backward()
    dist.barrier()
    if dist.get_rank() == 0:
        os.remove(path)
    print(f"rank {local_rank}: checkpoint came back on {state['weight'].device}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
