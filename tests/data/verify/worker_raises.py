"""Probe machinery test program: the probed line raises inside forked
DataLoader workers, and the script catches the loader's error, as training
scripts with a retry loop do. The probe must still see it per line."""
import torch
from torch.utils.data import DataLoader, Dataset


class Failing(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, index):
        raise RuntimeError("Cannot re-initialize CUDA in forked subprocess (simulated)")  # probe: MEM002


if __name__ == "__main__":
    loader = DataLoader(Failing(), batch_size=2, num_workers=2,
                        multiprocessing_context="fork")
    try:
        next(iter(loader))
    except RuntimeError as error:
        print("caught:", str(error).splitlines()[0])
