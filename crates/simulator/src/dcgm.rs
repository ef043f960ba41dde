//! Renders the simulated GPUs as dcgm-exporter prints `/metrics`.
//!
//! dcgm-exporter is a Go text template, not the Prometheus client: per field
//! one `# HELP`/`# TYPE` pair followed by one sample per GPU, no `_total`
//! suffix, no `_created`, int64 fields with `%d`, doubles with `%f`. Field
//! order, HELP texts and label layout follow the GPU Operator captures in
//! `shared/fixtures/real` (exporter 4.x `default-counters.csv`): `gpu`,
//! `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`, the
//! `DCGM_FI_DRIVER_VERSION` label field, then the Kubernetes labels sorted by
//! key (`container`, `namespace`, `pod`, `pod_uid`), left empty because the
//! simulator runs outside any pod. `DCGM_FI_DEV_XID_ERRORS` also carries
//! `err_code`/`err_msg`, sorted in among them.

use std::fmt::Write as _;

use crate::engine::{GpuState, Simulator};
use crate::fmt::{escape_label, go_d, go_f};

/// Hostname label of the simulated node.
pub const HOSTNAME: &str = "infertel-sim";
/// Driver version label (the LKE capture's driver).
pub const DRIVER_VERSION: &str = "580.95.05";

/// How a field's value is printed.
#[derive(Clone, Copy)]
enum Kind {
    Int,
    Double,
}

struct Field {
    name: &'static str,
    typ: &'static str,
    help: &'static str,
    kind: Kind,
    value: fn(&Simulator, &GpuState) -> f64,
}

/// Megabytes/s on the PCIe bus: token ids in, logits/tokens out, plus the
/// driver's background traffic that the LKE capture shows even when idle.
fn pcie(util: f64, base: f64, busy: f64) -> f64 {
    base + busy * util
}

fn fb_used(sim: &Simulator) -> f64 {
    // vLLM preallocates weights + KV pool at start-up: 94.1 % of the visible
    // framebuffer on the article's A10G (21,483 of 22,835 MiB).
    (sim.cfg.fb_total_mib * (21_483.0 / 22_835.0)).round()
}

const FIELDS: &[Field] = &[
    Field {
        name: "DCGM_FI_DEV_SM_CLOCK",
        typ: "gauge",
        help: "SM clock frequency (in MHz).",
        kind: Kind::Int,
        value: |_, g| if g.util > 0.05 { 1710.0 } else { 210.0 },
    },
    Field {
        name: "DCGM_FI_DEV_MEM_CLOCK",
        typ: "gauge",
        help: "Memory clock frequency (in MHz).",
        kind: Kind::Int,
        value: |_, g| if g.util > 0.05 { 6251.0 } else { 405.0 },
    },
    Field {
        name: "DCGM_FI_DEV_MEMORY_TEMP",
        typ: "gauge",
        help: "Memory temperature (in C).",
        kind: Kind::Int,
        // GDDR6 boards (A10G, L4, L40S, RTX 4000) report 0: not supported.
        value: |_, _| 0.0,
    },
    Field {
        name: "DCGM_FI_DEV_GPU_TEMP",
        typ: "gauge",
        help: "GPU temperature (in C).",
        kind: Kind::Int,
        value: |_, g| g.temp_c,
    },
    Field {
        name: "DCGM_FI_DEV_POWER_USAGE",
        typ: "gauge",
        help: "Power draw (in W).",
        kind: Kind::Double,
        value: |_, g| g.power_w,
    },
    Field {
        name: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        typ: "counter",
        help: "Total energy consumption since boot (in mJ).",
        kind: Kind::Int,
        // Truncate rather than round so the printed counter never goes back.
        value: |_, g| g.energy_mj.floor(),
    },
    Field {
        name: "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        typ: "counter",
        help: "Total number of PCIe retries.",
        kind: Kind::Int,
        value: |_, _| 0.0,
    },
    Field {
        name: "DCGM_FI_DEV_GPU_UTIL",
        typ: "gauge",
        help: "GPU utilization (in %).",
        kind: Kind::Int,
        value: |_, g| (g.util * 100.0).clamp(0.0, 100.0),
    },
    Field {
        name: "DCGM_FI_DEV_MEM_COPY_UTIL",
        typ: "gauge",
        help: "Memory utilization (in %).",
        kind: Kind::Int,
        value: |_, g| (g.dram_active * 100.0).clamp(0.0, 100.0),
    },
    Field {
        name: "DCGM_FI_DEV_ENC_UTIL",
        typ: "gauge",
        help: "Encoder utilization (in %).",
        kind: Kind::Int,
        value: |_, _| 0.0,
    },
    Field {
        name: "DCGM_FI_DEV_DEC_UTIL",
        typ: "gauge",
        help: "Decoder utilization (in %).",
        kind: Kind::Int,
        value: |_, _| 0.0,
    },
    Field {
        name: "DCGM_FI_DEV_XID_ERRORS",
        typ: "gauge",
        help: "Value of the last XID error encountered.",
        kind: Kind::Int,
        value: |_, _| 0.0,
    },
    Field {
        name: "DCGM_FI_DEV_FB_FREE",
        typ: "gauge",
        help: "Framebuffer memory free (in MiB).",
        kind: Kind::Int,
        value: |s, _| s.cfg.fb_total_mib.round() - fb_used(s),
    },
    Field {
        name: "DCGM_FI_DEV_FB_USED",
        typ: "gauge",
        help: "Framebuffer memory used (in MiB).",
        kind: Kind::Int,
        value: |s, _| fb_used(s),
    },
    Field {
        name: "DCGM_FI_DEV_FB_RESERVED",
        typ: "gauge",
        help: "Framebuffer memory reserved (in MiB).",
        kind: Kind::Int,
        // Driver-reserved memory, outside `fb_total_mib` (A10G: 23,028 MiB
        // physical = 22,835 visible + 193 reserved).
        value: |_, _| 193.0,
    },
    Field {
        name: "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        typ: "counter",
        help: "Number of remapped rows for uncorrectable errors",
        kind: Kind::Int,
        value: |_, _| 0.0,
    },
    Field {
        name: "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        typ: "counter",
        help: "Number of remapped rows for correctable errors",
        kind: Kind::Int,
        value: |_, _| 0.0,
    },
    Field {
        name: "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        typ: "gauge",
        help: "Whether remapping of rows has failed",
        kind: Kind::Int,
        value: |_, _| 0.0,
    },
    Field {
        name: "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        typ: "gauge",
        help: "vGPU License status",
        kind: Kind::Int,
        value: |_, _| 0.0,
    },
    Field {
        name: "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        typ: "gauge",
        help: "Ratio of time the graphics engine is active.",
        kind: Kind::Double,
        value: |_, g| g.gr_active,
    },
    Field {
        name: "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        typ: "gauge",
        help: "Ratio of cycles the tensor (HMMA) pipe is active.",
        kind: Kind::Double,
        value: |_, g| g.tensor_active,
    },
    Field {
        name: "DCGM_FI_PROF_DRAM_ACTIVE",
        typ: "gauge",
        help: "Ratio of cycles the device memory interface is active sending or receiving data.",
        kind: Kind::Double,
        value: |_, g| g.dram_active,
    },
    Field {
        name: "DCGM_FI_PROF_PCIE_TX_BYTES",
        typ: "gauge",
        help: "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
        kind: Kind::Int,
        value: |_, g| pcie(g.util, 21_300_000.0, 57_100_000.0),
    },
    Field {
        name: "DCGM_FI_PROF_PCIE_RX_BYTES",
        typ: "gauge",
        help: "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
        kind: Kind::Int,
        value: |_, g| pcie(g.util, 12_500_000.0, 33_400_000.0),
    },
];

/// PCI bus id of GPU `i`: AWS g5 instances put their GPUs at 00:1B.0–00:1E.0
/// (a single GPU at 00:1E.0).
fn pci_bus_id(i: usize, count: usize) -> String {
    let slot = 0x1E_usize.saturating_sub(count.saturating_sub(1)) + i;
    format!("00000000:{:02X}:{:02X}.0", slot / 0x20, slot % 0x20)
}

pub(crate) fn render(sim: &Simulator) -> String {
    let mut out = String::with_capacity(8 * 1024 * sim.gpus.len());
    let model = escape_label(&sim.cfg.gpu_model);
    let count = sim.gpus.len();
    for f in FIELDS {
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.typ);
        for (i, g) in sim.gpus.iter().enumerate() {
            let xid = if f.name == "DCGM_FI_DEV_XID_ERRORS" { "err_code=\"0\",err_msg=\"No Error\"," } else { "" };
            let v = (f.value)(sim, g);
            let v = match f.kind {
                Kind::Int => go_d(if f.typ == "counter" { v.floor() } else { v }),
                Kind::Double => go_f(v),
            };
            let _ = writeln!(
                out,
                "{}{{gpu=\"{i}\",UUID=\"{}\",pci_bus_id=\"{}\",device=\"nvidia{i}\",modelName=\"{model}\",Hostname=\"{HOSTNAME}\",DCGM_FI_DRIVER_VERSION=\"{DRIVER_VERSION}\",container=\"\",{xid}namespace=\"\",pod=\"\",pod_uid=\"\"}} {v}",
                f.name,
                g.uuid,
                pci_bus_id(i, count),
            );
        }
    }
    out
}
