//! Exporter `file`, as contrib's `fileexporter`: every batch, converted to
//! an OTLP `ExportMetricsServiceRequest` as the OTLP exporters convert it
//! (the OTel mapping, or exact names under `preserve_names`), appended to
//! `path`.
//!
//! - `encode.rs`: OTLP JSON or protobuf, zstd, framing;
//! - `writer.rs`: the file, its flushes and its rotation;
//! - `config.rs`: the keys.
//!
//! Samples written are counted in `infertel_exporter_sent_samples_total`;
//! a write that fails (a full disk, a removed directory) drops the batch,
//! counted in `infertel_exporter_dropped_samples_total{reason="write_error"}`
//! and logged.

pub mod config;
pub mod encode;
pub mod writer;

use crate::consumer::{BoxFuture, Consumer};
use crate::exporters::otlp::request_builder::{RequestBuilder, Shared};
use crate::telemetry::{Counter, Telemetry};
use config::FileConfig;
use infertel_model::Batch;
use infertel_otlp::Naming;
use std::sync::{Arc, Mutex, Weak};

pub struct FileExporter {
    id: String,
    cfg: FileConfig,
    shared: Shared,
    builder: Mutex<RequestBuilder>,
    writer: Mutex<Option<writer::Writer>>,
    sent: Arc<Counter>,
    dropped: Arc<Counter>,
}

impl FileExporter {
    /// Builds the exporter; with `open`, opens the file and starts flushing.
    pub fn new(id: String, cfg: FileConfig, telemetry: &Telemetry, open: bool) -> Result<Arc<Self>, String> {
        cfg.validate()?;
        let w = if open { Some(writer::Writer::open(&cfg)?) } else { None };
        let labels = [("exporter", id.as_str())];
        let e = Arc::new(FileExporter {
            sent: telemetry.counter("infertel_exporter_sent_samples_total", "Samples the backend accepted.", &labels),
            dropped: telemetry.counter(
                "infertel_exporter_dropped_samples_total",
                "Samples given up on, by reason.",
                &[("exporter", &id), ("reason", "write_error")],
            ),
            id,
            cfg,
            shared: Shared::default(),
            builder: Mutex::new(RequestBuilder::new(false)),
            writer: Mutex::new(w),
        });
        if open && let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(flush_every(Arc::downgrade(&e), e.cfg.flush_interval.get()));
        }
        Ok(e)
    }

    /// The consumer a pipeline feeds, with its naming.
    pub fn consumer(self: Arc<Self>, naming: Naming) -> Arc<dyn Consumer> {
        Arc::new(Named { exporter: self, naming })
    }

    fn write(&self, batch: &Batch, naming: Naming) {
        self.shared.observe(batch);
        let Some(req) = self.builder.lock().unwrap_or_else(|p| p.into_inner()).build(&self.shared, batch, naming)
        else {
            return;
        };
        let result = encode::record(&req.body, &self.cfg).and_then(|bytes| {
            let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
            match w.as_mut() {
                Some(w) => w.write(&bytes),
                None => Ok(()),
            }
        });
        match result {
            Ok(()) => self.sent.add(req.samples as u64),
            Err(e) => {
                self.dropped.add(req.samples as u64);
                tracing::error!(exporter = %self.id, "{} samples not written: {e}", req.samples);
            }
        }
    }

    /// Writes what is buffered (also at shutdown).
    pub fn flush(&self) {
        if let Some(w) = self.writer.lock().unwrap_or_else(|p| p.into_inner()).as_mut()
            && let Err(e) = w.flush()
        {
            tracing::error!(exporter = %self.id, "flush: {e}");
        }
    }
}

async fn flush_every(e: Weak<FileExporter>, every: std::time::Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(e) = e.upgrade() else { return };
        e.flush();
    }
}

struct Named {
    exporter: Arc<FileExporter>,
    naming: Naming,
}

impl Consumer for Named {
    fn consume(&self, batch: Batch) -> BoxFuture<'_, ()> {
        self.exporter.write(&batch, self.naming);
        Box::pin(async {})
    }
}
