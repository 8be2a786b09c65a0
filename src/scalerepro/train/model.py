"""Networks: a small CIFAR-style ResNet for the laptop, torchvision ResNets for the cluster."""

from __future__ import annotations

import torch
from torch import nn

from scalerepro.errors import UserError


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection (He et al. 2016)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        """Build the block; a 1x1 projection when the shape changes."""
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """conv-bn-relu-conv-bn + shortcut, relu."""
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.short(x))


class ResNet8(nn.Module):
    """Stem + three stages of one BasicBlock (widths w, 2w, 4w) + global pool + linear."""

    def __init__(self, classes: int, width: int) -> None:
        """Build the network."""
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.stages = nn.Sequential(
            BasicBlock(width, width, 1), BasicBlock(width, 2 * width, 2), BasicBlock(2 * width, 4 * width, 2)
        )
        self.fc = nn.Linear(4 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits."""
        pooled = nn.functional.adaptive_avg_pool2d(self.stages(self.stem(x)), 1)
        logits: torch.Tensor = self.fc(torch.flatten(pooled, 1))
        return logits


def build(name: str, classes: int, width: int) -> nn.Module:
    """The network called ``name`` with ``classes`` outputs."""
    if name == "resnet8":
        return ResNet8(classes, width)
    from torchvision import models  # imported here: torchvision costs a second per rank at start-up

    factories = {"resnet18": models.resnet18, "resnet50": models.resnet50, "resnet101": models.resnet101}
    if name not in factories:
        raise UserError(f"unknown model {name!r}; choose one of: resnet8, {', '.join(factories)}")
    net: nn.Module = factories[name](weights=None, num_classes=classes)
    return net
