import torch


def evaluate(model, loader):
    """Called under no_grad by the main.py beside it: no MEM004 here."""
    model.eval()
    total = 0
    for batch in loader:
        out = model(batch.cuda())
        total += out.sum().item()
    return torch.tensor(total)
