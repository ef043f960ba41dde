//! OTLP/gRPC: `opentelemetry.proto.collector.metrics.v1.MetricsService/Export`
//! on `protocols.grpc.endpoint`, gzip and zstd accepted, requests up to
//! `max_recv_msg_size_mib`, TLS when configured.

use super::config::Grpc;
use super::ingest::{Ingest, Refusal};
use infertel_otlp::opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use infertel_otlp::opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use std::sync::Arc;
use tonic::codec::CompressionEncoding;

struct Service(Arc<Ingest>);

#[tonic::async_trait]
impl MetricsService for Service {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        match self.0.export(request.into_inner(), "grpc").await {
            Ok(r) => Ok(tonic::Response::new(r)),
            Err(Refusal::Busy) => Err(tonic::Status::unavailable("data refused due to high memory usage")),
        }
    }
}

/// Serves until the task is aborted.
pub async fn serve(cfg: Grpc, listener: tokio::net::TcpListener, ingest: Arc<Ingest>) {
    let limit = (cfg.max_recv_msg_size_mib as usize).saturating_mul(1024 * 1024);
    let svc = MetricsServiceServer::new(Service(ingest.clone()))
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Zstd)
        .max_decoding_message_size(limit);
    let mut builder = tonic::transport::Server::builder();
    if let Some(n) = cfg.max_concurrent_streams {
        builder = builder.max_concurrent_streams(n);
    }
    if let Some(p) = cfg.keepalive.as_ref().and_then(|k| k.server_parameters.as_ref()) {
        builder = builder
            .http2_keepalive_interval(p.time.map(|d| d.get()))
            .http2_keepalive_timeout(p.timeout.map(|d| d.get()));
    }
    if let Some(t) = &cfg.tls {
        let identity = match (std::fs::read(&t.cert_file), std::fs::read(&t.key_file)) {
            (Ok(c), Ok(k)) => tonic::transport::Identity::from_pem(c, k),
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(receiver = %ingest.id, "protocols.grpc.tls: {e}: OTLP/gRPC is not served");
                return;
            }
        };
        builder = match builder.tls_config(tonic::transport::ServerTlsConfig::new().identity(identity)) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(receiver = %ingest.id, "protocols.grpc.tls: {e}: OTLP/gRPC is not served");
                return;
            }
        };
    }
    let addr = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    tracing::info!(receiver = %ingest.id, "OTLP/gRPC on {addr}");
    let incoming = tokio_stream_listener(listener);
    if let Err(e) = builder.add_service(svc).serve_with_incoming(incoming).await {
        tracing::error!(receiver = %ingest.id, "OTLP/gRPC on {addr} stopped: {e}");
    }
}

/// The listener's connections as the stream tonic serves.
fn tokio_stream_listener(
    l: tokio::net::TcpListener,
) -> impl futures_util::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures_util::stream::unfold(l, |l| async move {
        let r = l.accept().await.map(|(s, _)| {
            let _ = s.set_nodelay(true);
            s
        });
        Some((r, l))
    })
}
