"""Hardware that runs the job: does a current PyTorch CUDA wheel have kernels for this GPU on this host?

The facts are data in configs/gpus.yaml: each GPU's CUDA ``compute_capability`` and, under
``pytorch_cuda_wheels``, the CUDA architectures the current wheels ship per host CPU architecture
(read from the wheels; source there). A GPU of compute capability X.Y runs a wheel when the wheel
has a cubin for sm_XZ with Z <= Y (CUDA binary compatibility holds within a major version only).
The search leaves unsupported types out unless the user asks for them (``--include-unsupported``).
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from srift.catalog.instances import Instance


def _cc(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    return int(major), int(minor or 0)


@functools.lru_cache(maxsize=None)
def _arches(host_arch: str) -> tuple[tuple[int, int], ...]:
    from srift.hardware import pytorch_cuda_wheels

    hosts = pytorch_cuda_wheels()["hosts"]
    if host_arch not in hosts:
        return ()
    # "sm_86" -> (8, 6); "sm_100" -> (10, 0); "sm_120" -> (12, 0); the last digit is the minor version
    out = []
    for arch in hosts[host_arch]["arch_list"]:
        m = re.fullmatch(r"sm_(\d+)(\d)", str(arch))
        if m is None:
            raise ValueError(f"configs/gpus.yaml: pytorch_cuda_wheels arch {arch!r} is not sm_XY")
        out.append((int(m.group(1)), int(m.group(2))))
    return tuple(out)


def minimum_compute_capability(host_arch: str = "x86_64") -> str | None:
    """The oldest compute capability the current wheels run on for a host (``"7.5"``), None if no wheel."""
    arches = _arches(host_arch)
    return f"{min(arches)[0]}.{min(arches)[1]}" if arches else None


def gpu_supported(gpu_name: str, host_arch: str = "x86_64") -> tuple[bool, str]:
    """Whether the current PyTorch CUDA wheel for ``host_arch`` runs on ``gpu_name``, and why not.

    Returns:
        ``(True, "")`` or ``(False, reason)``, the reason one sentence a user can act on.
    """
    from srift.hardware import gpus, pytorch_cuda_wheels

    wheels = pytorch_cuda_wheels()
    version = f"PyTorch {wheels['torch_version']} (CUDA {wheels['cuda_version']})"
    spec = gpus().get(gpu_name)
    if spec is None:
        return False, f"{gpu_name} is not in configs/gpus.yaml, so srift cannot tell whether {version} runs on it."
    if spec.compute_capability is None:
        return False, f"{gpu_name} is not a CUDA GPU ({spec.architecture}): PyTorch's CUDA wheels do not run on it."
    arches = _arches(host_arch)
    if not arches:
        return False, f"{version} publishes no CUDA wheel for {host_arch} hosts."
    major, minor = _cc(spec.compute_capability)
    if any(a_major == major and a_minor <= minor for a_major, a_minor in arches):
        return True, ""
    return False, (f"{gpu_name} has compute capability {spec.compute_capability}; {version} wheels for {host_arch} hosts "
                   f"start at {minimum_compute_capability(host_arch)} (kernels for "
                   f"{', '.join(f'{a}.{b}' for a, b in arches)}): it needs an older PyTorch build.")


def supported(instance: "Instance") -> tuple[bool, str]:
    """Whether a current PyTorch CUDA wheel runs on this instance's GPUs and host, and why not.

    The search leaves out types that return False unless ``--include-unsupported``: K80 (3.7),
    M60 (5.2), P100 (6.0) and V100 (7.0) everywhere (current wheels start at 7.5 on x86_64),
    T4G on Graviton (the arm64 wheel starts at 8.0), and AMD GPUs.

    Returns:
        ``(True, "")`` or ``(False, reason)``.
    """
    return gpu_supported(instance.gpu_name, instance.host_arch)
