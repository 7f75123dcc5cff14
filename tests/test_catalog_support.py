"""Hardware that runs the job: compute capability against the current PyTorch wheels' CUDA kernels."""

import dataclasses

import pytest
import yaml

from srift.catalog import get_instance, load_catalog, supported
from srift.catalog.support import gpu_supported, minimum_compute_capability
from srift.hardware import gpus
from srift.files import configs_dir


def test_every_gpu_has_a_compute_capability_entry():
    raw = yaml.safe_load((configs_dir() / "gpus.yaml").read_text())
    for name, entry in raw["gpus"].items():
        assert "compute_capability" in entry, name
    assert gpus()["K80"].compute_capability == "3.7" and gpus()["M60"].compute_capability == "5.2"
    assert gpus()["B300"].compute_capability == "10.3" and gpus()["Radeon-Pro-V520"].compute_capability is None


def test_the_wheel_floor_per_host():
    # torch 2.13.0 (+cu130): x86_64 sm_75 sm_80 sm_86 sm_90 sm_100 sm_120; aarch64 sm_80 sm_90 sm_100 sm_110 sm_120
    assert minimum_compute_capability("x86_64") == "7.5"
    assert minimum_compute_capability("arm64") == "8.0"
    assert minimum_compute_capability("riscv64") is None


@pytest.mark.parametrize("gpu, host, ok", [
    ("K80", "x86_64", False), ("M60", "x86_64", False), ("P100", "x86_64", False), ("V100-16GB", "x86_64", False),
    ("T4", "x86_64", True),          # 7.5: sm_75
    ("L4", "x86_64", True),          # 8.9 runs the sm_86 cubin (same major, lower minor)
    ("B300", "x86_64", True),        # 10.3 runs sm_100
    ("RTX-PRO-6000", "x86_64", True),  # 12.0
    ("T4G", "arm64", False),         # the aarch64 wheel starts at sm_80
    ("GH200", "arm64", True),
    ("Radeon-Pro-V520", "x86_64", False),
])
def test_gpu_rule(gpu, host, ok):
    assert gpu_supported(gpu, host)[0] is ok


def test_reasons_a_user_can_act_on():
    ok, why = supported(get_instance("p2.xlarge"))
    assert not ok and "K80 has compute capability 3.7" in why and "start at 7.5" in why and "PyTorch 2.13.0" in why
    ok, why = supported(get_instance("g3.4xlarge"))
    assert not ok and "M60 has compute capability 5.2" in why
    ok, why = supported(get_instance("g5g.xlarge"))
    assert not ok and "arm64" in why and "start at 8.0" in why
    assert supported(get_instance("g4ad.xlarge"))[1].endswith("PyTorch's CUDA wheels do not run on it.")
    assert supported(get_instance("g5.xlarge")) == (True, "")
    assert not gpu_supported("Z9000")[0]


def test_the_rule_reads_the_host_arch_of_the_row():
    g5 = get_instance("g5.xlarge")
    assert supported(dataclasses.replace(g5, gpu_name="T4", host_arch="arm64"))[0] is False
    assert supported(dataclasses.replace(g5, gpu_name="T4", host_arch="x86_64"))[0] is True


def test_k80_and_m60_leave_the_catalog_by_the_rule_not_by_hand():
    rows = load_catalog(["aws", "azure"])
    old = [r for r in rows if r.gpu_name in ("K80", "M60")]
    assert {r.cloud for r in old} == {"aws", "azure"}  # still in the CSVs
    assert all(not supported(r)[0] for r in old)
