//! Writes the recorded scrapes behind `tests/fixtures/replay/article/`: five
//! scrapes 15 s apart of vLLM (8 concurrent requests) and dcgm-exporter whose
//! increases reproduce the article's tables. Run:
//! `cargo run -p infertel-inference --example write_article_replay -- tests/fixtures/replay/article`

use infertel_inference::article::{self, VllmState};

fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).expect("usage: write_article_replay DIR"));
    let t0 = 1_785_192_900; // 2026-07-27 22:55:00 UTC
    for job in ["vllm", "dcgm"] {
        std::fs::create_dir_all(dir.join(job)).expect("mkdir");
    }
    for i in 0..5 {
        let step = i as f64 * 0.25;
        let t = t0 + 15 * i;
        std::fs::write(
            dir.join("vllm").join(format!("{t}.prom")),
            article::vllm(VllmState { step, ..Default::default() }),
        )
        .expect("write");
        std::fs::write(dir.join("dcgm").join(format!("{t}.prom")), article::dcgm(step, false)).expect("write");
    }
}
