//! How one scrape's body is fetched: the request Prometheus sends (Accept,
//! the timeout header, gzip, `http_headers`, auth), the way it travels, and
//! the body read into a pooled buffer under `body_size_limit` and the scrape
//! timeout.
//!
//! A plain `http://` target scraped without a proxy travels on the loop's
//! own HTTP/1.1 connection ([`Direct`]), whose read buffer is bounded.
//! Everything else (TLS and HTTP/2, proxies, credentials in the URL, and
//! any redirect) goes through the job's shared reqwest client. The reason:
//! hyper keeps each kept-alive connection's read buffer at the largest size
//! a response made it grow to (up to about 400 KB), and reqwest does not
//! let that be bounded; with 100 targets of 140 KB those buffers held
//! 20 MB between scrapes, and about 200 MB with 1,000.

use super::job::{ACCEPT_HEADER, JobSettings};
use super::series::{ScrapeFailure, fail};
use super::target::Target;
use crate::http::{LazyClient, describe_error};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use reqwest::header::{
    ACCEPT, ACCEPT_ENCODING, AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE, HOST, HeaderMap, HeaderName, HeaderValue,
    USER_AGENT,
};
use std::time::{Duration, Instant};

/// The most a direct connection buffers of a response at once: a body
/// arrives in pieces of at most this, copied into the scrape's buffer. The
/// buffer stays with the kept-alive connection between scrapes, so it is
/// memory per target: at 32 KiB the buffers were 2.6 MB of the heap at 100
/// targets. Response headers must fit in it, as in hyper.
const READ_BUF: usize = 16 << 10;
/// A kept-alive connection idle longer than this is not reused (reqwest's
/// pool keeps one 90 s).
const IDLE: Duration = Duration::from_secs(90);

/// The request headers of a scrape, as Prometheus sends them.
fn request_headers(target: &Target, job: &JobSettings) -> Result<HeaderMap, ScrapeFailure> {
    let bad = |what: &str| fail("http", format!("{what}: not a valid header value"));
    let mut h = HeaderMap::with_capacity(8);
    let accept = job.accept.as_deref().unwrap_or(ACCEPT_HEADER);
    h.insert(ACCEPT, HeaderValue::from_str(accept).map_err(|_| bad("Accept"))?);
    let secs = HeaderValue::from_str(&format!("{}", target.timeout.as_secs_f64())).map_err(|_| bad("timeout"))?;
    h.insert(HeaderName::from_static("x-prometheus-scrape-timeout-seconds"), secs);
    if !job.compression {
        h.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    }
    for (name, hd) in &job.headers {
        let n =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| fail("http", format!("{name}: not a header name")))?;
        for v in hd.values.iter().chain(&hd.secrets) {
            h.append(n.clone(), HeaderValue::from_str(v).map_err(|_| bad(name))?);
        }
        for f in &hd.files {
            let v =
                crate::http::read_secret_file(f, &format!("http_headers {name} file")).map_err(|e| fail("auth", e))?;
            h.append(n.clone(), HeaderValue::from_str(&v).map_err(|_| bad(name))?);
        }
    }
    if let Some(a) = job.auth.header().map_err(|e| fail("auth", e))? {
        h.insert(AUTHORIZATION, a);
    }
    Ok(h)
}

/// Fetches the target's body into `buf`; returns its content type.
pub(super) async fn fetch(
    client: &LazyClient,
    direct: &mut Option<Direct>,
    target: &Target,
    job: &JobSettings,
    buf: &mut Vec<u8>,
) -> Result<Option<String>, ScrapeFailure> {
    // The client is asked for even when the direct connection carries the
    // scrape: a job whose TLS files cannot be read fails every scrape, as
    // it did before there was a direct path.
    let client = client.get().map_err(|e| fail("tls", e))?;
    let headers = request_headers(target, job)?;
    let limit = job.body_size_limit;
    let fut = async {
        buf.clear();
        let sent = match direct.as_mut() {
            Some(d) => d.send(&target.url, &headers).await?,
            None => None,
        };
        if let Some(resp) = sent {
            let ct = resp.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_string);
            let gzip = resp.headers().get(CONTENT_ENCODING).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
            let declared = resp.headers().get(reqwest::header::CONTENT_LENGTH);
            let declared = declared.and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
            let mut body = resp.into_body();
            let mut sink = if gzip {
                Sink::Gzip(Gunzip::new(&mut *buf, limit))
            } else {
                reserve(buf, declared, limit);
                Sink::Plain(&mut *buf, limit)
            };
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| fail("body", format!("error reading response body: {e}")))?;
                if let Some(chunk) = frame.data_ref() {
                    sink.take(chunk)?;
                }
            }
            sink.finish()?;
            return Ok(ct);
        }
        // A target that redirects is scraped through the job's client from
        // now on: it follows the redirect or refuses it (`follow_redirects`).
        *direct = None;
        let mut resp = client.get(&target.url).headers(headers).send().await.map_err(|e| classify(&e))?;
        let status = resp.status();
        if status != reqwest::StatusCode::OK {
            return Err(fail("http_status", format!("server returned HTTP status {status}")));
        }
        let ct = resp.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_string);
        reserve(buf, resp.content_length(), limit);
        while let Some(chunk) = resp.chunk().await.map_err(|e| classify(&e))? {
            take(buf, &chunk, limit)?;
        }
        Ok(ct)
    };
    let r = match tokio::time::timeout(target.timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(fail("timeout", format!("scrape timed out after {:?}", target.timeout))),
    };
    if r.is_err()
        && let Some(d) = direct.as_mut()
    {
        // The connection may be in the middle of a response.
        d.live = None;
    }
    r
}

/// Room for the declared length in one allocation instead of doubling; a
/// claim past the limit fails when read, and the header is not trusted
/// beyond 64 MiB.
fn reserve(buf: &mut Vec<u8>, declared: Option<u64>, limit: u64) {
    if let Some(n) = declared
        && (limit == 0 || n <= limit)
    {
        buf.reserve(n.min(64 << 20) as usize);
    }
}

/// Appends a piece of the body. A body of exactly the limit fails too, as in
/// Prometheus (`n >= bodySizeLimit` after reading at most the limit).
fn take(buf: &mut Vec<u8>, chunk: &[u8], limit: u64) -> Result<(), ScrapeFailure> {
    if limit > 0 && (buf.len() + chunk.len()) as u64 >= limit {
        return Err(over_limit(limit));
    }
    buf.extend_from_slice(chunk);
    Ok(())
}

fn over_limit(limit: u64) -> ScrapeFailure {
    fail("body_size_limit", format!("body size limit exceeded: {limit} bytes or more"))
}

/// Where a direct response's body goes, `body_size_limit` counting what
/// lands in the scrape buffer.
enum Sink<'a> {
    Plain(&'a mut Vec<u8>, u64),
    Gzip(Gunzip<'a>),
}

impl Sink<'_> {
    fn take(&mut self, chunk: &[u8]) -> Result<(), ScrapeFailure> {
        match self {
            Sink::Plain(buf, limit) => take(buf, chunk, *limit),
            Sink::Gzip(g) => g.push(chunk),
        }
    }

    fn finish(self) -> Result<(), ScrapeFailure> {
        match self {
            Sink::Plain(..) => Ok(()),
            Sink::Gzip(g) => g.finish(),
        }
    }
}

/// A gzip body decoded as it arrives, into the scrape buffer, the limit
/// counting decoded bytes (as Prometheus reads the body through its gzip
/// reader): neither the compressed body nor a decoded one past the limit
/// is ever held whole.
struct Gunzip<'a>(flate2::write::GzDecoder<Limited<'a>>);

/// The scrape buffer as the decoder's output, under the limit.
struct Limited<'a> {
    buf: &'a mut Vec<u8>,
    limit: u64,
    exceeded: bool,
}

impl std::io::Write for Limited<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if take(self.buf, b, self.limit).is_err() {
            self.exceeded = true;
            return Err(std::io::Error::other("body size limit exceeded"));
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> Gunzip<'a> {
    fn new(buf: &'a mut Vec<u8>, limit: u64) -> Gunzip<'a> {
        Gunzip(flate2::write::GzDecoder::new(Limited { buf, limit, exceeded: false }))
    }

    fn failed(&self, e: std::io::Error) -> ScrapeFailure {
        let out = self.0.get_ref();
        if out.exceeded {
            over_limit(out.limit)
        } else {
            fail("body", format!("error decoding response body: gzip: {e}"))
        }
    }

    fn push(&mut self, chunk: &[u8]) -> Result<(), ScrapeFailure> {
        std::io::Write::write_all(&mut self.0, chunk).map_err(|e| self.failed(e))
    }

    /// Ends the stream: a body cut short (no trailer) is an error.
    fn finish(mut self) -> Result<(), ScrapeFailure> {
        self.0.try_finish().map_err(|e| self.failed(e))
    }
}

fn classify(e: &reqwest::Error) -> ScrapeFailure {
    let msg = describe_error(e);
    let reason = if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connection"
    } else if e.is_decode() || e.is_body() {
        "body"
    } else {
        "http"
    };
    fail(reason, msg)
}

/// A scrape loop's own HTTP/1.1 connection to a plain `http://` target,
/// kept alive between scrapes, with a read buffer of at most [`READ_BUF`].
pub(super) struct Direct {
    host: url::Host<String>,
    port: u16,
    /// The Host header: host, and port when the URL gives one.
    authority: HeaderValue,
    /// Path and query, the request target.
    path: hyper::Uri,
    user_agent: HeaderValue,
    live: Option<Live>,
}

struct Live {
    sender: SendRequest<Empty<Bytes>>,
    /// The task that drives the connection: ended with it.
    driver: tokio::task::AbortHandle,
    last_used: Instant,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl Direct {
    /// The direct path for a target, where it can carry the scrape: a plain
    /// `http://` URL without credentials, in a job without a proxy.
    pub fn for_target(url: &str, job: &JobSettings) -> Option<Direct> {
        if !job.direct_http {
            return None;
        }
        let u = url::Url::parse(url).ok()?;
        if u.scheme() != "http" || !u.username().is_empty() || u.password().is_some() {
            return None;
        }
        let host = u.host()?.to_owned();
        let port = u.port_or_known_default()?;
        let authority = &u[url::Position::BeforeHost..url::Position::AfterPort];
        let path = &u[url::Position::BeforePath..url::Position::AfterQuery];
        Some(Direct {
            host,
            port,
            authority: HeaderValue::from_str(authority).ok()?,
            path: path.parse().ok()?,
            user_agent: HeaderValue::from_str(&crate::http::user_agent()).ok()?,
            live: None,
        })
    }

    async fn connect(&self, url: &str) -> Result<Live, ScrapeFailure> {
        let failed = |e: std::io::Error| {
            fail("connection", format!("error sending request for url ({url}): tcp connect error: {e}"))
        };
        let tcp = match &self.host {
            url::Host::Domain(d) => tokio::net::TcpStream::connect((d.as_str(), self.port)).await,
            url::Host::Ipv4(a) => tokio::net::TcpStream::connect((*a, self.port)).await,
            url::Host::Ipv6(a) => tokio::net::TcpStream::connect((*a, self.port)).await,
        }
        .map_err(failed)?;
        let _ = tcp.set_nodelay(true);
        let (sender, conn) = hyper::client::conn::http1::Builder::new()
            .max_buf_size(READ_BUF)
            .handshake::<_, Empty<Bytes>>(hyper_util::rt::TokioIo::new(tcp))
            .await
            .map_err(|e| fail("connection", format!("error sending request for url ({url}): {e}")))?;
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        })
        .abort_handle();
        Ok(Live { sender, driver, last_used: Instant::now() })
    }

    /// Sends the scrape's request. `None`: the target redirects (the job's
    /// client, which knows `follow_redirects`, takes over).
    async fn send(
        &mut self,
        url: &str,
        headers: &HeaderMap,
    ) -> Result<Option<hyper::Response<hyper::body::Incoming>>, ScrapeFailure> {
        for attempt in 0..2 {
            let reused = self.live.as_ref().is_some_and(|l| !l.sender.is_closed() && l.last_used.elapsed() < IDLE);
            if !reused {
                self.live = None;
                self.live = Some(self.connect(url).await?);
            }
            let mut req = hyper::Request::new(Empty::<Bytes>::new());
            *req.uri_mut() = self.path.clone();
            let h = req.headers_mut();
            h.insert(HOST, self.authority.clone());
            h.insert(USER_AGENT, self.user_agent.clone());
            h.extend(headers.clone());
            // What reqwest adds for a job that wants gzip (`fetch` decodes it).
            if !h.contains_key(ACCEPT_ENCODING) {
                h.insert(ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
            }
            let Some(live) = self.live.as_mut() else { continue };
            live.last_used = Instant::now();
            let sent = match live.sender.ready().await {
                Ok(()) => live.sender.send_request(req).await,
                Err(e) => Err(e),
            };
            match sent {
                Ok(resp) if resp.status().is_redirection() => {
                    self.live = None;
                    return Ok(None);
                }
                Ok(resp) if resp.status() != hyper::StatusCode::OK => {
                    return Err(fail("http_status", format!("server returned HTTP status {}", resp.status())));
                }
                Ok(resp) => return Ok(Some(resp)),
                // The target closed the kept-alive connection as the request
                // went out (servers close idle ones: uvicorn after 5 s): once
                // more on a new one, as reqwest's pool does.
                // A GET is safe to repeat; a reply that did not parse is not
                // a closed connection, and is not retried.
                Err(e) if reused && attempt == 0 && !e.is_parse() && !e.is_user() => {
                    self.live = None;
                }
                Err(e) => {
                    self.live = None;
                    return Err(fail("http", format!("error sending request for url ({url}): {e}")));
                }
            }
        }
        Err(fail("http", format!("error sending request for url ({url}): the connection closed twice")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_without_proxy_or_credentials_goes_direct() {
        let mut job = JobSettings::new("r");
        job.direct_http = true;
        let d = Direct::for_target("http://127.0.0.1:9400/metrics?x=1", &job).unwrap();
        assert_eq!((d.authority.to_str().unwrap(), d.path.to_string().as_str()), ("127.0.0.1:9400", "/metrics?x=1"));
        let d = Direct::for_target("http://[::1]:80/m", &job).unwrap();
        assert_eq!((d.authority.to_str().unwrap(), d.port), ("[::1]", 80));
        assert!(Direct::for_target("https://h:443/m", &job).is_none());
        assert!(Direct::for_target("http://u:p@h:80/m", &job).is_none());
        job.direct_http = false;
        assert!(Direct::for_target("http://h:80/m", &job).is_none());
    }

    #[test]
    fn a_gzip_body_is_decoded_as_it_arrives_under_the_limit() {
        use std::io::Write;
        let gz = |body: &[u8]| {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(body).unwrap();
            e.finish().unwrap()
        };
        // Fed in pieces of 7 bytes, as a body arrives in frames.
        let decode = |gz: &[u8], limit: u64| {
            let mut buf = Vec::new();
            let mut g = Gunzip::new(&mut buf, limit);
            for piece in gz.chunks(7) {
                g.push(piece)?;
            }
            g.finish().map(|()| buf)
        };
        let body = "a 1\n".repeat(1000);
        let small = gz(body.as_bytes());
        assert!(small.len() < 200, "{}", small.len());
        assert_eq!(decode(&small, 0).unwrap(), body.as_bytes());
        assert_eq!(decode(&small, 4001).unwrap(), body.as_bytes());
        // Exactly the limit fails, as in Prometheus.
        assert_eq!(decode(&small, 4000).unwrap_err().reason, "body_size_limit");
        // Cut short: no trailer.
        assert_eq!(decode(&small[..small.len() / 2], 0).unwrap_err().reason, "body");
        assert_eq!(decode(&small[..small.len() - 4], 0).unwrap_err().reason, "body");
        assert_eq!(decode(b"not gzip at all", 0).unwrap_err().reason, "body");
        // 64 MiB of zeros in 64 KiB of gzip, under a 1 MiB limit: refused
        // while decoding, holding no more than the limit.
        let bomb = gz(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 128 << 10, "{}", bomb.len());
        let mut buf = Vec::new();
        let mut g = Gunzip::new(&mut buf, 1 << 20);
        let err = bomb.chunks(READ_BUF).map(|p| g.push(p)).find_map(Result::err).expect("refused");
        assert_eq!(err.reason, "body_size_limit");
        drop(g);
        assert!(buf.len() < 1 << 20, "{}", buf.len());
    }
}
