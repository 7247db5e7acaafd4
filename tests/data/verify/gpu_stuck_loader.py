"""GPU test program: a measured line, then a DataLoader whose worker hangs
on its fourth sample, so the main thread waits for a batch forever; verify's
--timeout must keep the verdict measured before and say where it hung."""
import time

import torch
from torch.utils.data import DataLoader, Dataset


class HangsOnFourth(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, index):
        if index == 3:
            time.sleep(3600)
        return torch.ones(4)


if __name__ == "__main__":
    table = torch.ones(16 * 2**20, device="cuda")  # probe: MEM001
    for batch in DataLoader(HangsOnFourth(), batch_size=1, num_workers=1):
        batch = batch.cuda()
