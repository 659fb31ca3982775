"""Hardware facts as data: one row per device, each with its source.

Peak numbers are dense (sparse figures are 2x and are not peaks). A device that is not in this table
gets no peak: MFU is then null with a warning, never computed against a guessed default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

SPEC_SHEETS = "vendor spec sheets, dense (non-sparse) tensor-core peaks"
PRICE_NOTE_2026 = "cliffcenter.com/research/amd-inference-economics (2026-05-18), on-demand rates"


@dataclass(frozen=True)
class DeviceSpec:
    key: str
    vendor: str  # nvidia | amd
    name: str
    name_pattern: str  # regex matched (case-insensitive) against torch.cuda.get_device_name()
    bf16_tflops: Optional[float]
    fp8_tflops: Optional[float]
    fp32_tflops: Optional[float]  # non-tensor FP32 (torch's default matmul precision, no TF32)
    memory_gib: float  # HBM capacity as marketed (vendors' "GB" for HBM are binary GiB)
    tdp_w: float
    price_per_hour_usd: Optional[float]
    source: str
    price_source: str = ""

    def peak_tflops(self, precision: str) -> Optional[float]:
        """Dense peak for the training precision; None where no spec-sheet figure exists."""
        return {"bf16": self.bf16_tflops, "fp8": self.fp8_tflops, "fp32": self.fp32_tflops}.get(precision)

    def supports(self, precision: str) -> bool:
        return self.peak_tflops(precision) is not None or precision == "fp32"


# An NVL or PCIe card is another part than the SXM module of the same name (other clocks and power): never read as it
NOT_NVL_OR_PCIE = r"(?!.*\b(?:NVL|PCIe)\b)"
DEVICES: dict[str, DeviceSpec] = {
    d.key: d
    for d in (
        DeviceSpec("a100", "nvidia", "NVIDIA A100 SXM", r"\bA100\b", 312.0, None, 19.5, 80, 400, None,
                   SPEC_SHEETS + " (NVIDIA A100 datasheet)"),
        # TDP: the default power limit torchtitan's benchmark states for this part ("We used the default 500W power
        # limit, although tuning it up to 700W TDP can ..."; footnote 2: "HBM2e-based SXM H100 with lower TDP").
        # Peaks: the H100 SXM's, an upper bound: the same footnote puts the part's "between SXM and NVL" ("we don't
        # know its exact value").
        DeviceSpec("h100_96gb", "nvidia", "NVIDIA H100 96GB HBM2e", r"\bH100\b.*\b9[46]\s*GB\b.*HBM2e", 989.4, 1978.9,
                   67.0, 96, 500, None, SPEC_SHEETS + " (NVIDIA H100 SXM datasheet, an upper bound for this part: its "
                   "peak is between SXM and NVL, exact value not published; 500 W default power limit and 700 W "
                   "maximum: pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Hardware and footnote 2)"),
        DeviceSpec("h100", "nvidia", "NVIDIA H100 SXM", r"\bH100\b" + NOT_NVL_OR_PCIE, 989.4, 1978.9, 67.0, 80, 700, 2.99,
                   SPEC_SHEETS + " (NVIDIA H100 datasheet)", PRICE_NOTE_2026 + ": Lambda H100 SXM"),
        DeviceSpec("h200_nvl", "nvidia", "NVIDIA H200 NVL", r"\bH200\b.*\bNVL\b", 835.5, 1670.5, 60.0, 141, 600, None,
                   SPEC_SHEETS + " (NVIDIA H200 datasheet, H200 NVL column: 1,671 / 3,341 TFLOP/s BF16 / FP8 with "
                   "sparsity, up to 600 W)"),
        DeviceSpec("h200", "nvidia", "NVIDIA H200 SXM", r"\bH200\b" + NOT_NVL_OR_PCIE, 989.4, 1978.9, 67.0, 141, 700,
                   None, SPEC_SHEETS + " (NVIDIA H200 datasheet)"),
        DeviceSpec("b200", "nvidia", "NVIDIA B200", r"\bB200\b", 2250.0, 4500.0, None, 180, 1000, None,
                   SPEC_SHEETS + " (NVIDIA DGX B200 datasheet, per GPU)"),
        DeviceSpec("b300", "nvidia", "NVIDIA B300 (Blackwell Ultra, HGX)", r"\bB300\b", 2250.0, 4500.0, 75.0, 270, 1100,
                   None, SPEC_SHEETS + " (NVIDIA HGX B300: 72 PFLOPS FP8 and 36 PFLOPS BF16 with sparsity over 8 GPUs; "
                   "270 GB HBM3e per GPU as MLPerf v5.1's systems JSONs name it (B300-SXM-270GB), 1.1 kW max TDP)"),
        DeviceSpec("gb200", "nvidia", "NVIDIA GB200 (Blackwell in a Grace superchip)", r"\bGB200\b", 2500.0, 5000.0, 80.0,
                   186, 1200, None, SPEC_SHEETS + " (NVIDIA GB200 NVL72 per GPU: 360 PFLOPS BF16 and 720 PFLOPS FP8 with "
                   "sparsity, 13.4 TB HBM3e and 576 TB/s over 72 GPUs; the GPU at 1,200 W)"),
        DeviceSpec("gb300", "nvidia", "NVIDIA GB300 (Blackwell Ultra in a Grace superchip)", r"\bGB300\b", 2500.0,
                   5000.0, 80.0, 279, 1400, None, SPEC_SHEETS + " (NVIDIA GB300 NVL72 per GPU: 180 PFLOPS BF16 and 360 "
                   "PFLOPS FP8 dense, 279 GB HBM3e per GPU (20 TB over 72), 576 TB/s over 72 GPUs; 1.4 kW max TDP)"),
        DeviceSpec("mi250x", "amd", "AMD Instinct MI250X", r"MI250X", 383.0, None, 47.9, 128, 560, None,
                   SPEC_SHEETS + " (AMD Instinct MI250X datasheet)"),
        DeviceSpec("mi300x", "amd", "AMD Instinct MI300X", r"MI300X", 1307.4, 2614.9, 163.4, 192, 750, 1.99,
                   SPEC_SHEETS + " (AMD Instinct MI300X datasheet)", PRICE_NOTE_2026 + ": median MI300X"),
        DeviceSpec("mi325x", "amd", "AMD Instinct MI325X", r"MI325X", 1307.4, 2614.9, 163.4, 256, 1000, 1.95,
                   SPEC_SHEETS + " (AMD Instinct MI325X datasheet)", PRICE_NOTE_2026 + ": TensorWave MI325X"),
        DeviceSpec("mi350x", "amd", "AMD Instinct MI350X", r"MI350X", 2306.9, 4613.7, None, 288, 1000, None,
                   SPEC_SHEETS + " (AMD Instinct MI350X datasheet: 2.3 PFLOPS BF16, 4.6 PFLOPS FP8 dense, 288 GB HBM3E; "
                   "1,000 W total board power, the air-cooled MI350 part, AMD at Hot Chips 2025)"),
        DeviceSpec("mi355x", "amd", "AMD Instinct MI355X", r"MI355X", 2516.6, 5033.2, None, 288, 1400, None,
                   SPEC_SHEETS + " (AMD Instinct MI355X datasheet)"),
    )
}

# Measured achievable matmul ceilings (MAMF), TFLOP/s, BF16 and FP8 (float8_e4m3fn): Stas Bekman, ml-engineering,
# compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS comparison table" (every figure here in it since
# bfbb33a, 2025-12-09, unchanged to 744d01e, 2026-08-22; B300 and GB200 measured on torch 2.9.1 / 2.10 with CUDA 13.0;
# no FP8 figure for AMD's parts)
MAMF_BF16_TFLOPS = {"a100": 271.2, "h100": 794.5, "b200": 1745.0, "b300": 1769.0, "gb200": 1822.0, "mi300x": 668.4,
                    "mi325x": 784.9, "mi355x": 1565.0}
MAMF_FP8_TFLOPS = {"h100": 1402.6, "h200": 1453.4, "b200": 3432.5, "b300": 3353.3, "gb200": 3615.6}
# H200 and the 96 GB H100: the H100 SXM's GH100 die and clocks with other HBM: H100's ceiling (the table: "H200 is the
# same" in BF16; its FP8 row is H200's own)
MAMF_SAME_DIE = {"h200": "h100", "h100_96gb": "h100"}
# Parts with no measured ceiling of their own: the fraction of its spec peak a part of the same architecture reaches
# (MAMF / its spec peak) applied to theirs. GB300: the B300's, its Blackwell Ultra die, in a Grace superchip at more
# power (BF16 1,769 of 2,250, 0.786; FP8 3,353.3 of 4,500, 0.745) - a choice: GB200's fractions (0.729, 0.723), the
# same superchip's with the older die, would put GB300 at GB200's ceilings; CDNA 4 (MI350X, the MI355X's die at a lower
# power): the MI355X's 1,565 of 2,516.6 (0.622); H200 NVL: the H100's
MAMF_SAME_ARCHITECTURE = {"gb300": "b300", "mi350x": "mi355x", "h200_nvl": "h100"}
MAMF_SOURCE = "Maximum Achievable Matmul FLOPS (Stas Bekman, ml-engineering, mamf-finder; its comparison table since bfbb33a)"


@dataclass(frozen=True)
class Bandwidth:
    """Memory and link bandwidths of one device, from its vendor's spec sheet: ceilings, not measurements."""

    hbm_gb_s: float  # HBM bandwidth
    link_gb_s: float  # GPU-to-GPU inside a node, per direction (half the marketed bidirectional figure)
    source: str


BANDWIDTHS = {
    "a100": Bandwidth(2039.0, 300.0, "NVIDIA A100 80GB SXM datasheet: 2,039 GB/s HBM2e; NVLink 3 600 GB/s bidirectional"),
    "h100": Bandwidth(3350.0, 450.0, "NVIDIA H100 SXM datasheet: 3.35 TB/s HBM3; NVLink 4 900 GB/s bidirectional"),
    "h100_96gb": Bandwidth(2400.0, 450.0, "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (Grand "
                                          "Teton): 96 GB HBM2e at 2.4 TB/s; NVLink 4 900 GB/s bidirectional"),
    "h200": Bandwidth(4800.0, 450.0, "NVIDIA H200 SXM datasheet: 4.8 TB/s HBM3e; NVLink 4 900 GB/s bidirectional"),
    "b200": Bandwidth(8000.0, 900.0, "NVIDIA DGX B200 datasheet: 64 TB/s HBM3e over 8 GPUs; NVLink 5 1.8 TB/s "
                                     "bidirectional per GPU"),
    "h200_nvl": Bandwidth(4800.0, 450.0, "NVIDIA H200 datasheet, H200 NVL: 4.8 TB/s HBM3e; 2- or 4-way NVLink bridge "
                                         "900 GB/s bidirectional"),
    "b300": Bandwidth(8000.0, 900.0, "NVIDIA HGX B300: up to 8 TB/s HBM3e per GPU; NVLink 5 1.8 TB/s bidirectional "
                                     "per GPU"),
    "gb200": Bandwidth(8000.0, 900.0, "NVIDIA GB200 NVL72: 576 TB/s HBM3e over 72 GPUs; NVLink 5 1.8 TB/s "
                                      "bidirectional per GPU"),
    "gb300": Bandwidth(8000.0, 900.0, "NVIDIA GB300 NVL72: 576 TB/s HBM3e over 72 GPUs; NVLink 5 1.8 TB/s "
                                      "bidirectional per GPU"),
    "mi350x": Bandwidth(8000.0, 537.6, "AMD Instinct MI350X datasheet: 8 TB/s HBM3E; 7 Infinity Fabric links of "
                                       "153.6 GB/s bidirectional (1,075 GB/s)"),
    "mi250x": Bandwidth(3276.8, 200.0, "AMD Instinct MI250X datasheet: 3.2768 TB/s HBM2e; 8 Infinity Fabric links "
                                       "of 50 GB/s per direction (400 GB/s per direction in all)"),
    "mi300x": Bandwidth(5300.0, 448.0, "AMD Instinct MI300X datasheet: 5.3 TB/s HBM3; 7 Infinity Fabric links, "
                                       "896 GB/s aggregate bidirectional"),
    "mi325x": Bandwidth(6000.0, 448.0, "AMD Instinct MI325X datasheet: 6 TB/s HBM3e; 7 Infinity Fabric links, "
                                       "896 GB/s aggregate bidirectional"),
    "mi355x": Bandwidth(8000.0, 537.6, "AMD Instinct MI355X datasheet: 8 TB/s HBM3e; 7 Infinity Fabric links of "
                                       "153.6 GB/s bidirectional (1,075 GB/s)"),
}
# Between nodes, per GPU and direction: one 400 Gb/s NIC per GPU, as in DGX H100/H200/B200 (ConnectX-7) and
# the MI300X/MI325X/MI355X reference platforms (8x 400G NICs). A cluster's own figure: ``tprimat preflight``.
INTER_NODE_GB_S = 50.0
INTER_NODE_SOURCE = "one 400 Gb/s NIC per GPU (DGX H100/B200 and AMD Instinct platform reference designs)"

# Precision each platform kind can train in at all (device-specific limits come from DEVICES).
PLATFORM_PRECISIONS = {"cpu": ("fp32", "bf16"), "nvidia": ("fp32", "bf16", "fp8"), "amd": ("fp32", "bf16", "fp8")}


def lookup(key: Optional[str]) -> Optional[DeviceSpec]:
    return DEVICES.get(key.lower()) if key else None


def device_key_from_name(device_name: str) -> Optional[str]:
    """Map a device name as torch reports it ("NVIDIA H100 80GB HBM3") to a table key, or None."""
    for spec in DEVICES.values():
        if re.search(spec.name_pattern, device_name, flags=re.IGNORECASE):
            return spec.key
    return None
