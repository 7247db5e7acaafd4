"""One process reloads its best checkpoint into the model it trained: into a
torchvision ResNet-101 (44.5M parameters, a size `analysis/model_sizes.py`
knows) and into a small network built layer by layer (a size it does not
know). `memlint check --preview` reports the first as a warning that names
its size and the second as a note in preview; `memlint verify --preview`
measures what each load puts on the GPU (bench/verify_sizes_session.sh)."""
import torch
import torchvision
from torch import nn


def train_step(model, classes):
    images = torch.randn(8, 3, 224, 224, device="cuda")
    labels = torch.randint(0, classes, (8,), device="cuda")
    loss = nn.functional.cross_entropy(model(images), labels)
    loss.backward()


def best_resnet():
    model = torchvision.models.resnet101(weights=None).cuda()
    train_step(model, 1000)
    torch.save(model.state_dict(), "/tmp/best_resnet.pt")
    model.load_state_dict(torch.load("/tmp/best_resnet.pt"))
    return model


def best_small_net():
    model = nn.Sequential(nn.Conv2d(3, 16, 3, stride=4), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).cuda()
    train_step(model, 10)
    torch.save(model.state_dict(), "/tmp/best_small.pt")
    model.load_state_dict(torch.load("/tmp/best_small.pt"))
    return model


if __name__ == "__main__":
    best_resnet()
    best_small_net()
