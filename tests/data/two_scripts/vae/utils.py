import torch


def evaluate(model, loader):
    """Called with autograd on by the main.py beside it: MEM004."""
    model.eval()
    total = 0
    for batch in loader:
        out = model(batch.cuda())
        total += out.sum().item()
    return torch.tensor(total)
