"""Image models of the zoo, defined with plain torch.nn (same structure and parameter counts as the
published reference implementations; no weights)."""

from __future__ import annotations

import torch
from torch import nn

from srift.zoo.text import TransformerBlock


# ---- ResNet (torchvision v1.5: stride on the 3x3 conv) ------------------------------------------
class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        width = planes
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, layers: tuple[int, int, int, int], num_classes: int = 1000) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make(64, layers[0], 1)
        self.layer2 = self._make(128, layers[1], 2)
        self.layer3 = self._make(256, layers[2], 2)
        self.layer4 = self._make(512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512 * Bottleneck.expansion, num_classes)

    def _make(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * Bottleneck.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * Bottleneck.expansion, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * Bottleneck.expansion),
            )
        layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * Bottleneck.expansion
        layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet50() -> nn.Module:
    return ResNet((3, 4, 6, 3))


def resnet152() -> nn.Module:
    return ResNet((3, 8, 36, 3))


# ---- VGG-16 (configuration D) -----------------------------------------------------------------
class VGG(nn.Module):
    def __init__(self, cfg: list[int | str], num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c = 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(c, int(v), 3, padding=1), nn.ReLU(inplace=True)]
                c = int(v)
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(7)
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(),
            nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def vgg16() -> nn.Module:
    return VGG([64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"])


# ---- DenseNet-201 -------------------------------------------------------------------------------
class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int, bn_size: int) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        x = torch.cat(features, 1)
        return self.conv2(self.relu2(self.norm2(self.conv1(self.relu1(self.norm1(x))))))


class DenseBlock(nn.Module):
    def __init__(self, n: int, cin: int, growth: int, bn_size: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DenseLayer(cin + i * growth, growth, bn_size) for i in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = [x]
        for layer in self.layers:
            feats.append(layer(feats))
        return torch.cat(feats, 1)


class Transition(nn.Sequential):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(nn.BatchNorm2d(cin), nn.ReLU(inplace=True), nn.Conv2d(cin, cout, 1, bias=False), nn.AvgPool2d(2, 2))


class DenseNet(nn.Module):
    def __init__(self, growth: int = 32, blocks: tuple[int, ...] = (6, 12, 48, 32), init: int = 64,
                 bn_size: int = 4, num_classes: int = 1000) -> None:
        super().__init__()
        mods: list[nn.Module] = [nn.Conv2d(3, init, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(init),
                                 nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1)]
        c = init
        for i, n in enumerate(blocks):
            mods.append(DenseBlock(n, c, growth, bn_size))
            c += n * growth
            if i != len(blocks) - 1:
                mods.append(Transition(c, c // 2))
                c //= 2
        mods += [nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1)]
        self.features = nn.Sequential(*mods)
        self.classifier = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def densenet201() -> nn.Module:
    return DenseNet(blocks=(6, 12, 48, 32))


# ---- Inception-v4 (Szegedy et al. 2016; 1000 classes: 42,679,816 parameters, as timm) ---------------------------
class BasicConv(nn.Module):
    """Conv (no bias) + BatchNorm (eps 1e-3) + ReLU, as in the reference implementations."""

    def __init__(self, cin: int, cout: int, kernel: int | tuple[int, int], stride: int = 1,
                 padding: int | tuple[int, int] = 0) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.bn(self.conv(x)))


class _Branches(nn.Module):
    def __init__(self, *branches: nn.Module) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([b(x) for b in self.branches], 1)


def _seq(*mods: nn.Module) -> nn.Sequential:
    return nn.Sequential(*mods)


def _pool_proj(cin: int, cout: int) -> nn.Sequential:
    return _seq(nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False), BasicConv(cin, cout, 1))


def _inception_a() -> nn.Module:
    return _Branches(
        BasicConv(384, 96, 1),
        _seq(BasicConv(384, 64, 1), BasicConv(64, 96, 3, padding=1)),
        _seq(BasicConv(384, 64, 1), BasicConv(64, 96, 3, padding=1), BasicConv(96, 96, 3, padding=1)),
        _pool_proj(384, 96),
    )


def _inception_b() -> nn.Module:
    return _Branches(
        BasicConv(1024, 384, 1),
        _seq(BasicConv(1024, 192, 1), BasicConv(192, 224, (1, 7), padding=(0, 3)), BasicConv(224, 256, (7, 1), padding=(3, 0))),
        _seq(BasicConv(1024, 192, 1), BasicConv(192, 192, (7, 1), padding=(3, 0)), BasicConv(192, 224, (1, 7), padding=(0, 3)),
             BasicConv(224, 224, (7, 1), padding=(3, 0)), BasicConv(224, 256, (1, 7), padding=(0, 3))),
        _pool_proj(1024, 128),
    )


class _InceptionC(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.b0 = BasicConv(1536, 256, 1)
        self.b1_0 = BasicConv(1536, 384, 1)
        self.b1_1a = BasicConv(384, 256, (1, 3), padding=(0, 1))
        self.b1_1b = BasicConv(384, 256, (3, 1), padding=(1, 0))
        self.b2_0 = BasicConv(1536, 384, 1)
        self.b2_1 = BasicConv(384, 448, (3, 1), padding=(1, 0))
        self.b2_2 = BasicConv(448, 512, (1, 3), padding=(0, 1))
        self.b2_3a = BasicConv(512, 256, (1, 3), padding=(0, 1))
        self.b2_3b = BasicConv(512, 256, (3, 1), padding=(1, 0))
        self.b3 = _pool_proj(1536, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b1 = self.b1_0(x)
        b2 = self.b2_2(self.b2_1(self.b2_0(x)))
        return torch.cat([self.b0(x), self.b1_1a(b1), self.b1_1b(b1), self.b2_3a(b2), self.b2_3b(b2), self.b3(x)], 1)


class InceptionV4(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.features = nn.Sequential(
            BasicConv(3, 32, 3, stride=2), BasicConv(32, 32, 3), BasicConv(32, 64, 3, padding=1),
            _Branches(nn.MaxPool2d(3, stride=2), BasicConv(64, 96, 3, stride=2)),
            _Branches(_seq(BasicConv(160, 64, 1), BasicConv(64, 96, 3)),
                      _seq(BasicConv(160, 64, 1), BasicConv(64, 64, (1, 7), padding=(0, 3)),
                           BasicConv(64, 64, (7, 1), padding=(3, 0)), BasicConv(64, 96, 3))),
            _Branches(BasicConv(192, 192, 3, stride=2), nn.MaxPool2d(3, stride=2)),
            *[_inception_a() for _ in range(4)],
            _Branches(BasicConv(384, 384, 3, stride=2),
                      _seq(BasicConv(384, 192, 1), BasicConv(192, 224, 3, padding=1), BasicConv(224, 256, 3, stride=2)),
                      nn.MaxPool2d(3, stride=2)),
            *[_inception_b() for _ in range(7)],
            _Branches(_seq(BasicConv(1024, 192, 1), BasicConv(192, 192, 3, stride=2)),
                      _seq(BasicConv(1024, 256, 1), BasicConv(256, 256, (1, 7), padding=(0, 3)),
                           BasicConv(256, 320, (7, 1), padding=(3, 0)), BasicConv(320, 320, 3, stride=2)),
                      nn.MaxPool2d(3, stride=2)),
            *[_InceptionC() for _ in range(3)],
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.last_linear = nn.Linear(1536, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last_linear(torch.flatten(self.pool(self.features(x)), 1))


def inception_v4() -> nn.Module:
    return InceptionV4()


# ---- ViT-B/16 ------------------------------------------------------------------------------------
def vit_b16() -> nn.Module:
    class ViT(nn.Module):
        def __init__(self, image: int = 224, patch: int = 16, dim: int = 768, depth: int = 12, heads: int = 12,
                     mlp: int = 3072, num_classes: int = 1000) -> None:
            super().__init__()
            self.conv_proj = nn.Conv2d(3, dim, patch, stride=patch)
            n = (image // patch) ** 2
            self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
            self.pos_embedding = nn.Parameter(torch.zeros(1, n + 1, dim))
            self.layers = nn.ModuleList(TransformerBlock(dim, heads, mlp, pre_norm=True, eps=1e-6) for _ in range(depth))
            self.ln = nn.LayerNorm(dim, eps=1e-6)
            self.head = nn.Linear(dim, num_classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.conv_proj(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embedding
            for layer in self.layers:
                x = layer(x)
            return self.head(self.ln(x)[:, 0])

    return ViT()
