"""Synthetic datasets built with plain torch (no torchvision, no downloads).

``SyntheticImages``: random uint8 "encoded" images, decoded and augmented on
the CPU in ``__getitem__`` (what a DataLoader worker does for an ImageNet-style
pipeline): uint8 -> float, random crop, bilinear resize back to the output
size, random horizontal flip, per-channel normalisation. Every sample is a
function of (seed, index) only, so runs are reproducible and the loader
workers do real CPU work per sample.
"""
from __future__ import annotations

import torch
from torch.utils.data import Dataset

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


class SyntheticImages(Dataset):
    def __init__(self, length: int, side: int = 224, channels: int = 3, classes: int = 1000,
                 crop: float = 0.875, seed: int = 0) -> None:
        if side < 8:
            raise ValueError(f"image side {side}: allowed >= 8 pixels")
        self.length, self.side, self.channels, self.classes = length, side, channels, classes
        self.crop = crop
        self.seed = seed
        self.mean = torch.tensor(MEAN[:channels] if channels <= 3 else [0.5] * channels).view(-1, 1, 1)
        self.std = torch.tensor(STD[:channels] if channels <= 3 else [0.25] * channels).view(-1, 1, 1)

    def __len__(self) -> int:
        return self.length

    def raw(self, index: int) -> torch.Tensor:
        """The 'encoded' image: random uint8, C x H x W, a function of the index."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        return torch.randint(0, 256, (self.channels, self.side, self.side), dtype=torch.uint8, generator=g)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index + 7)
        img = self.raw(index).float().div_(255.0)  # "decode"
        s = self.side
        c = max(8, int(s * self.crop))
        top = int(torch.randint(0, s - c + 1, (1,), generator=g))
        left = int(torch.randint(0, s - c + 1, (1,), generator=g))
        img = img[:, top:top + c, left:left + c]
        img = torch.nn.functional.interpolate(img.unsqueeze(0), size=(s, s), mode="bilinear",
                                              align_corners=False).squeeze(0)
        if bool(torch.rand((), generator=g) < 0.5):
            img = img.flip(-1)
        img = img.sub_(self.mean).div_(self.std)
        return img.contiguous(), torch.tensor(index % self.classes, dtype=torch.int64)


class InfiniteSampler(torch.utils.data.Sampler):
    """0, 1, 2, ... modulo the dataset length, forever: a loader that never ends an epoch,
    so its workers start once and every timed batch is a steady-state batch."""

    def __init__(self, length: int, start: int = 0) -> None:
        self.length, self.start = length, start

    def __iter__(self):
        i = self.start
        while True:
            yield i % self.length
            i += 1
