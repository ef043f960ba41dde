//! Which metric names a source speaks, and which names feed each derived
//! series, from vLLM 0.5 (V0 engine) to 0.33 and for dcgm-exporter before and
//! after the DCGM 4.6 `_RATIO` renames; and the other inference servers a
//! target may be (SGLang, TGI, llama.cpp, TensorRT-LLM's `trtllm-serve`,
//! Triton with the TensorRT-LLM backend, NVIDIA Dynamo), recognised from the
//! families they expose. Sources: `shared/reference/vllm-metrics.md`,
//! `vllm-metrics-matrix.txt`, `dcgm-metrics.md`, and `docs/engines/` (each
//! engine's names read in its own source, with the commits).
//!
//! `inputs.rs` lists the inputs and their names; `expectations.rs` what each
//! schema should expose; this file the schemas, their detection and the
//! family bit set detection reads.

mod expectations;
mod inputs;

pub use expectations::expectations;
pub use inputs::*;

/// What a target is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Vllm,
    Dcgm,
    Sglang,
    Tgi,
    Llamacpp,
    Trtllm,
    Triton,
    Dynamo,
    Other,
}

impl Source {
    /// The `inference_server` label value of an inference server's series.
    pub fn inference_server(self) -> Option<&'static str> {
        Some(match self {
            Source::Vllm => "vllm",
            Source::Sglang => "sglang",
            Source::Tgi => "tgi",
            Source::Llamacpp => "llamacpp",
            Source::Trtllm => "trtllm",
            Source::Triton => "triton",
            Source::Dynamo => "dynamo",
            Source::Dcgm | Source::Other => return None,
        })
    }

    /// Whether `name` is one of this source's own metric names (by prefix).
    pub fn owns(self, name: &str) -> bool {
        let prefixes: &[&str] = match self {
            Source::Vllm => &["vllm:"],
            Source::Dcgm => &["DCGM_FI_"],
            Source::Sglang => &["sglang:"],
            Source::Tgi => &["tgi_"],
            Source::Llamacpp => &["llamacpp:"],
            Source::Trtllm => &["trtllm_", "trtllm:"],
            Source::Triton => &["nv_"],
            Source::Dynamo => &["dynamo_"],
            Source::Other => &[""],
        };
        prefixes.iter().any(|p| name.starts_with(p))
    }

    /// The inference server as people write it.
    pub fn display_name(self) -> &'static str {
        match self {
            Source::Vllm => "vLLM",
            Source::Dcgm => "dcgm-exporter",
            Source::Sglang => "SGLang",
            Source::Tgi => "Hugging Face TGI",
            Source::Llamacpp => "llama.cpp server",
            Source::Trtllm => "TensorRT-LLM trtllm-serve",
            Source::Triton => "Triton Inference Server",
            Source::Dynamo => "NVIDIA Dynamo",
            Source::Other => "an unknown source",
        }
    }
}

/// Schema eras, named by the releases that expose them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Schema {
    /// V0 engine up to 0.9.1 (≤0.7, or `VLLM_USE_V1=0` on 0.8.x–0.9.1): no
    /// `engine` label, `num_requests_swapped`, `gpu_prefix_cache_hit_rate`
    /// gauge.
    VllmV0,
    /// V0 engine on 0.9.2–0.11.0 (`VLLM_USE_V1=0`; V0 was removed in
    /// 0.11.1): the V0 markers (`num_requests_swapped`, `cpu_cache_usage_perc`,
    /// `gpu_prefix_cache_hit_rate`) are gone and no prefix-cache metric is
    /// left; told from V1 without `engine` label by the absence of V1's
    /// prefix-cache counters.
    VllmV0Late,
    /// V1 0.7.x–0.8.2: no `engine` label; `gpu_prefix_cache_*` count blocks.
    VllmV1NoEngine,
    /// V1 0.8.3–0.9.1: `engine` label, old names only. `gpu_prefix_cache_*`
    /// count blocks up to 0.8.5 and tokens from 0.9.0 (PR #18003); the
    /// exposition does not tell the two apart.
    VllmV1OldNames,
    /// V1 0.9.2–0.11: old and new names side by side.
    VllmV1BothNames,
    /// V1 0.11.x as exposed by default: the old names hidden (they need
    /// `--show-hidden-metrics-for-version=0.10`), the deprecated
    /// `time_per_output_token_seconds` still shown.
    VllmV1_011,
    /// V1 0.12–0.15: new names only, no `prompt_tokens_cached`.
    VllmV1NewNames,
    /// V1 0.16 and later (the article's 0.23; current 0.33).
    VllmV1Current,
    /// dcgm-exporter with the classic field names (all released CSVs so far).
    DcgmClassic,
    /// dcgm-exporter with DCGM 4.6 canonical names (`*_RATIO`, `BOARD_POWER_WATTS`).
    Dcgm46,
    /// SGLang 0.3.5.post2–0.4.3: `time_per_output_token_seconds`, no ITL
    /// histogram yet.
    Sglang03,
    /// SGLang 0.4.5–0.5.1: the ITL histogram, no `queue_time_seconds`.
    Sglang04,
    /// SGLang 0.5.4 and later: `queue_time_seconds`.
    Sglang05,
    /// Hugging Face TGI (`tgi_*`; its metric set has been stable since 1.x).
    Tgi,
    /// llama.cpp's `llama-server --metrics` (`llamacpp:*`).
    Llamacpp,
    /// TensorRT-LLM's `trtllm-serve` with its `trtllm_` prefix.
    TrtllmServe,
    /// TensorRT-LLM metrics as Dynamo re-exported them with `trtllm:`
    /// (ai-dynamo/dynamo#3676 to #4269).
    TrtllmDynamo,
    /// Triton with the TensorRT-LLM backend (`nv_trt_llm_*` beside
    /// `nv_inference_*`).
    TritonTrtllm,
    /// Triton serving another backend (`nv_inference_*` only).
    Triton,
    /// NVIDIA Dynamo's HTTP frontend (`dynamo_frontend_*`).
    DynamoFrontend,
    /// A Dynamo worker whose engine's own metrics are not on the page
    /// (`dynamo_component_*` only; with `vllm:` or `sglang:` passed through
    /// it is that engine).
    DynamoWorker,
}

impl Schema {
    pub fn as_str(self) -> &'static str {
        match self {
            Schema::VllmV0 => "vllm-v0",
            Schema::VllmV0Late => "vllm-v0-0.9.2-0.11",
            Schema::VllmV1NoEngine => "vllm-v1-0.7",
            Schema::VllmV1OldNames => "vllm-v1-0.8",
            Schema::VllmV1BothNames => "vllm-v1-0.9-0.11",
            Schema::VllmV1_011 => "vllm-v1-0.11",
            Schema::VllmV1NewNames => "vllm-v1-0.12-0.15",
            Schema::VllmV1Current => "vllm-v1-0.16+",
            Schema::DcgmClassic => "dcgm-classic",
            Schema::Dcgm46 => "dcgm-4.6",
            Schema::Sglang03 => "sglang-0.3",
            Schema::Sglang04 => "sglang-0.4",
            Schema::Sglang05 => "sglang-0.5",
            Schema::Tgi => "tgi",
            Schema::Llamacpp => "llamacpp",
            Schema::TrtllmServe => "trtllm-serve",
            Schema::TrtllmDynamo => "trtllm-dynamo",
            Schema::TritonTrtllm => "triton-trtllm",
            Schema::Triton => "triton",
            Schema::DynamoFrontend => "dynamo-frontend",
            Schema::DynamoWorker => "dynamo-worker",
        }
    }

    pub fn source(self) -> Source {
        match self {
            Schema::DcgmClassic | Schema::Dcgm46 => Source::Dcgm,
            Schema::Sglang03 | Schema::Sglang04 | Schema::Sglang05 => Source::Sglang,
            Schema::Tgi => Source::Tgi,
            Schema::Llamacpp => Source::Llamacpp,
            Schema::TrtllmServe | Schema::TrtllmDynamo => Source::Trtllm,
            Schema::TritonTrtllm | Schema::Triton => Source::Triton,
            Schema::DynamoFrontend | Schema::DynamoWorker => Source::Dynamo,
            Schema::VllmV0
            | Schema::VllmV0Late
            | Schema::VllmV1NoEngine
            | Schema::VllmV1OldNames
            | Schema::VllmV1BothNames
            | Schema::VllmV1_011
            | Schema::VllmV1NewNames
            | Schema::VllmV1Current => Source::Vllm,
        }
    }

    /// Derived series this server cannot give, and why: logged when the
    /// target is first seen (nothing is emitted for them).
    pub fn not_derived(self) -> &'static [(&'static str, &'static str)] {
        match self.source() {
            Source::Tgi => &[
                ("infertel_time_to_first_token_seconds", "TGI has no time-to-first-token histogram"),
                ("infertel_kv_cache_usage_ratio", "TGI exposes no KV-cache usage"),
                ("infertel_prefix_cache_hit_ratio", "TGI exposes no prefix-cache counters"),
            ],
            Source::Llamacpp => &[
                ("infertel_time_to_first_token_seconds", "llama.cpp exposes no latency histograms"),
                ("infertel_inter_token_latency_seconds", "llama.cpp exposes no latency histograms"),
                ("infertel_e2e_latency_seconds", "llama.cpp exposes no latency histograms"),
                ("infertel_kv_cache_usage_ratio", "llama.cpp's KV gauges were removed"),
            ],
            Source::Triton => &[
                ("infertel_inter_token_latency_seconds", "Triton exposes no inter-token histogram"),
                (
                    "infertel_e2e_latency_seconds",
                    "Triton counts request time, not a histogram: only its mean (infertel_request_phase_seconds)",
                ),
            ],
            Source::Dynamo if self == Schema::DynamoWorker => &[
                (
                    "infertel_time_to_first_token_seconds",
                    "a Dynamo worker's own page has no latency histograms: they are on the frontend, or the engine's (vllm:, sglang:) when the worker passes them through",
                ),
                (
                    "infertel_generation_tokens_per_second",
                    "a Dynamo worker counts requests, not tokens: see the frontend",
                ),
            ],
            Source::Dynamo => &[
                ("infertel_kv_cache_usage_ratio", "Dynamo's frontend has none: read it on the workers"),
                ("infertel_prompt_tokens_per_second", "Dynamo's frontend counts no prompt tokens"),
            ],
            _ => &[],
        }
    }

    /// Whether this schema's series go through the engine derivations
    /// (`engine/vllm.rs`): the servers whose inputs mean what vLLM's do.
    pub fn engine_derived(self) -> bool {
        self.source() != Source::Dcgm
    }

    /// True when the prefix-cache counters of this era may count KV blocks,
    /// not tokens (V1 before 0.9.0; 0.8.3–0.9.1 cannot be told apart, so
    /// the whole era is treated as possibly blocks).
    pub fn prefix_cache_in_blocks(self) -> bool {
        matches!(self, Schema::VllmV1NoEngine | Schema::VllmV1OldNames)
    }

    /// The V0 engine, of either era.
    pub fn is_v0(self) -> bool {
        matches!(self, Schema::VllmV0 | Schema::VllmV0Late)
    }
}

/// The families of a target that schema detection and expectations look at
/// (every input name and every era marker, see [`relevant_families`]) as a
/// bit set, plus whether any `vllm:` or `DCGM_FI_` family is exposed at all.
/// A bit set because it is rebuilt on every scrape of every target.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Families {
    bits: [u64; 4],
    pub any_vllm: bool,
    pub any_dcgm: bool,
    /// The other engines' prefixes seen ([`engine_prefix`] bits).
    pub engines: u16,
}

/// Bits of [`Families::engines`]: a family under each engine's prefix.
pub mod prefix {
    pub const SGLANG: u16 = 1;
    pub const TGI: u16 = 1 << 1;
    pub const LLAMACPP: u16 = 1 << 2;
    pub const TRTLLM: u16 = 1 << 3;
    /// `trtllm:`, the prefix Dynamo once added.
    pub const TRTLLM_COLON: u16 = 1 << 4;
    pub const TRITON: u16 = 1 << 5;
    pub const TRITON_TRTLLM: u16 = 1 << 6;
    pub const DYNAMO_FRONTEND: u16 = 1 << 7;
    pub const DYNAMO_COMPONENT: u16 = 1 << 8;
}

/// The engine prefix bit of a metric name (0 for none): one byte compared
/// for most names, as this runs on every new series.
#[inline]
pub fn engine_prefix(name: &str) -> u16 {
    let b = name.as_bytes();
    match b.first() {
        Some(b's') if name.starts_with("sglang:") => prefix::SGLANG,
        Some(b't') if name.starts_with("tgi_") => prefix::TGI,
        Some(b't') if name.starts_with("trtllm_") => prefix::TRTLLM,
        Some(b't') if name.starts_with("trtllm:") => prefix::TRTLLM_COLON,
        Some(b'l') if name.starts_with("llamacpp:") => prefix::LLAMACPP,
        Some(b'n') if name.starts_with("nv_trt_llm_") => prefix::TRITON_TRTLLM,
        Some(b'n') if name.starts_with("nv_inference_") => prefix::TRITON,
        Some(b'd') if name.starts_with("dynamo_frontend_") => prefix::DYNAMO_FRONTEND,
        Some(b'd') if name.starts_with("dynamo_component_") => prefix::DYNAMO_COMPONENT,
        _ => 0,
    }
}

impl Families {
    /// Records a family (base name: histograms without `_bucket` etc.).
    pub fn insert(&mut self, family: &str) {
        if family.starts_with("vllm:") {
            self.any_vllm = true;
        } else if family.starts_with("DCGM_FI_") {
            self.any_dcgm = true;
        }
        self.engines |= engine_prefix(family);
        if let Some(i) = relevant_index(family) {
            self.set(i);
        }
    }

    #[inline]
    fn set(&mut self, i: u8) {
        self.bits[usize::from(i >> 6)] |= 1 << (i & 63);
    }

    /// Records a family known by its index in [`relevant_families`].
    pub fn insert_index(&mut self, i: u8) {
        self.set(i);
    }

    /// True when `family` was recorded; always false for a family that is
    /// neither an input nor an era marker (those are not tracked).
    pub fn contains(&self, family: &str) -> bool {
        relevant_index(family).is_some_and(|i| self.bits[usize::from(i >> 6)] & (1 << (i & 63)) != 0)
    }
}

impl<'a> FromIterator<&'a str> for Families {
    fn from_iter<I: IntoIterator<Item = &'a str>>(iter: I) -> Self {
        let mut f = Families::default();
        for x in iter {
            f.insert(x);
        }
        f
    }
}

/// Era markers that are not inputs.
const MARKERS: &[&str] = &[
    "vllm:num_requests_swapped",
    "vllm:cpu_cache_usage_perc",
    "vllm:gpu_prefix_cache_hit_rate",
    "vllm:avg_generation_throughput_toks_per_s",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total",
    "vllm:gpu_cache_usage_perc",
    "vllm:gpu_prefix_cache_queries_total",
    "vllm:prompt_tokens_cached_total",
    "DCGM_FI_DEV_GPU_UTIL_RATIO",
    "DCGM_FI_DEV_BOARD_POWER_WATTS",
    "DCGM_FI_PROF_DRAM_UTIL_RATIO",
    "DCGM_FI_PROF_TENSOR_UTIL_RATIO",
    // SGLang's eras (the ITL histogram replaced the TPOT one in 0.4.5; the
    // queue histogram came in 0.5.4).
    "sglang:time_per_output_token_seconds",
];

/// The families [`Families`] tracks: input names, then era markers, each once.
pub fn relevant_families() -> &'static [&'static str] {
    static LIST: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
        let mut v: Vec<&'static str> = Vec::new();
        let engines = ENGINE_INPUTS.iter().flat_map(|i| i.names.iter().copied());
        for n in ALL_INPUTS.iter().flat_map(|i| i.names.iter().copied()).chain(MARKERS.iter().copied()).chain(engines) {
            if !v.contains(&n) {
                v.push(n);
            }
        }
        assert!(v.len() <= 256, "Families holds 256 families");
        v
    });
    &LIST
}

fn relevant_index(family: &str) -> Option<u8> {
    relevant_families().iter().position(|f| *f == family).map(|i| i as u8)
}

/// The schema a target's families and `engine` label imply.
pub fn detect(families: &Families, vllm_engine_label: bool) -> Option<Schema> {
    let has = |n: &str| families.contains(n);
    if families.any_vllm {
        if has("vllm:num_requests_swapped")
            || has("vllm:cpu_cache_usage_perc")
            || has("vllm:gpu_prefix_cache_hit_rate")
            || has("vllm:avg_generation_throughput_toks_per_s")
        {
            return Some(Schema::VllmV0);
        }
        if !vllm_engine_label {
            // V1 registers its prefix-cache counters whether or not the cache
            // is on; V0 never had them.
            let v1_prefix = has("vllm:gpu_prefix_cache_queries_total") || has("vllm:prefix_cache_queries_total");
            return Some(if v1_prefix { Schema::VllmV1NoEngine } else { Schema::VllmV0Late });
        }
        let new = has("vllm:kv_cache_usage_perc") || has("vllm:prefix_cache_queries_total");
        let old = has("vllm:gpu_cache_usage_perc") || has("vllm:gpu_prefix_cache_queries_total");
        return Some(match (old, new) {
            (true, true) => Schema::VllmV1BothNames,
            (true, false) => Schema::VllmV1OldNames,
            _ if has("vllm:prompt_tokens_cached_total") => Schema::VllmV1Current,
            _ if has("vllm:time_per_output_token_seconds") => Schema::VllmV1_011,
            _ => Schema::VllmV1NewNames,
        });
    }
    let e = families.engines;
    if e & prefix::SGLANG != 0 {
        return Some(if has("sglang:queue_time_seconds") {
            Schema::Sglang05
        } else if has("sglang:inter_token_latency_seconds") {
            Schema::Sglang04
        } else if has("sglang:time_per_output_token_seconds") {
            Schema::Sglang03
        } else {
            // Histograms appear with the first request: a server that has
            // served none yet is taken as current.
            Schema::Sglang05
        });
    }
    if e & prefix::TRTLLM != 0 {
        return Some(Schema::TrtllmServe);
    }
    if e & prefix::TRTLLM_COLON != 0 {
        return Some(Schema::TrtllmDynamo);
    }
    if e & prefix::TRITON_TRTLLM != 0 {
        return Some(Schema::TritonTrtllm);
    }
    if e & prefix::TRITON != 0 {
        return Some(Schema::Triton);
    }
    if e & prefix::TGI != 0 {
        return Some(Schema::Tgi);
    }
    if e & prefix::LLAMACPP != 0 {
        return Some(Schema::Llamacpp);
    }
    // The frontend also appends the runtime's `dynamo_component_router_*`.
    if e & prefix::DYNAMO_FRONTEND != 0 {
        return Some(Schema::DynamoFrontend);
    }
    if e & prefix::DYNAMO_COMPONENT != 0 {
        return Some(Schema::DynamoWorker);
    }
    if families.any_dcgm {
        let renamed = [
            "DCGM_FI_DEV_GPU_UTIL_RATIO",
            "DCGM_FI_DEV_BOARD_POWER_WATTS",
            "DCGM_FI_PROF_DRAM_UTIL_RATIO",
            "DCGM_FI_PROF_TENSOR_UTIL_RATIO",
        ];
        return Some(if renamed.iter().any(|n| has(n)) { Schema::Dcgm46 } else { Schema::DcgmClassic });
    }
    None
}

/// The family a wire name belongs to (histogram and summary parts folded).
pub fn family_of(name: &str) -> &str {
    for suffix in ["_bucket", "_count", "_sum"] {
        if let Some(base) = name.strip_suffix(suffix) {
            return base;
        }
    }
    name
}
