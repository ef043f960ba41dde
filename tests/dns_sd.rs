//! `dns_sd_configs` against a real DNS server (Debian's dnsmasq) on a free
//! loopback port, end to end into a real Prometheus: SRV, A and AAAA records
//! become targets with Prometheus' `__meta_dns_*` labels; while the server
//! is down the known targets are kept (the failures counted); a record
//! removed from the zone ends its target's series with staleness markers.

mod support;

use std::process::Command;
use std::time::Duration;
use support::*;

/// dnsmasq answering for `infer.test` only (NXDOMAIN for any other name in
/// it, as an authoritative zone would), with the given records.
fn dnsmasq(port: u16, records: &[String], dir: &std::path::Path, n: usize) -> Proc {
    let bin = require("dnsmasq");
    let mut cmd = Command::new(bin);
    cmd.args([
        "--keep-in-foreground",
        "--no-resolv",
        "--no-hosts",
        "--no-poll",
        "--conf-file=/dev/null",
        "--pid-file=",
        "--bind-interfaces",
        "--listen-address=127.0.0.1",
        "--local=/infer.test/",
        "--log-queries",
        "--log-facility=-",
        &format!("--port={port}"),
    ]);
    cmd.args(records);
    let log = dir.join(format!("dnsmasq-{n}.log"));
    let p = Proc::spawn("dnsmasq", &mut cmd, log);
    // Answering once the socket is bound.
    wait_until("dnsmasq listening", Duration::from_secs(10), || {
        std::net::UdpSocket::bind("127.0.0.1:0").ok().and_then(|s| {
            // A query for the SOA of the zone: any answer means it is up.
            let q = [
                0x12u8, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 5, b'i', b'n', b'f', b'e', b'r', 4, b't', b'e', b's', b't',
                0, 0, 6, 0, 1,
            ];
            s.set_read_timeout(Some(Duration::from_millis(200))).ok()?;
            s.send_to(&q, ("127.0.0.1", port)).ok()?;
            let mut buf = [0u8; 512];
            s.recv(&mut buf).ok().map(|_| ())
        })
    });
    p
}

#[test]
fn dns_sd_srv_and_a_records_into_prometheus() {
    let (a, b) = (Targets::start(), Targets::start());
    for t in [&a, &b] {
        t.set_counter("/metrics", "dsd_requests_total", 1);
    }
    let (pa, pb) = (a.addr.port(), b.addr.port());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let both = vec![
        format!("--srv-host=_metrics._tcp.infer.test,a.infer.test,{pa},0,10"),
        format!("--srv-host=_metrics._tcp.infer.test,b.infer.test,{pb},0,10"),
        "--host-record=a.infer.test,127.0.0.1".to_string(),
        "--host-record=b.infer.test,127.0.0.1".to_string(),
        "--host-record=vllm.infer.test,127.0.0.1".to_string(),
        "--host-record=v6.infer.test,::1".to_string(),
    ];
    let mut dns = dnsmasq(port, &both, dir.path(), 0);

    let sink = Prometheus::start("");
    let cfg = format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 500ms, scrape_timeout: 500ms}}
      scrape_configs:
        - job_name: dns-srv
          dns_sd_configs:
            - names: [_metrics._tcp.infer.test]
              refresh_interval: 1s
              nameservers: ['127.0.0.1:{port}']
          relabel_configs:
            # The SRV targets' names resolve only in the test zone: scrape
            # them on loopback at the port the record gives.
            - {{source_labels: [__meta_dns_srv_record_port], target_label: __address__, replacement: '127.0.0.1:$1'}}
            - {{source_labels: [__meta_dns_srv_record_target], target_label: srv_target}}
            - {{source_labels: [__meta_dns_name], target_label: dns_name}}
        - job_name: dns-a
          dns_sd_configs:
            - names: [vllm.infer.test]
              type: A
              port: {pa}
              refresh_interval: 1s
              nameservers: ['127.0.0.1:{port}']
          relabel_configs:
            - {{source_labels: [__meta_dns_name], target_label: dns_name}}
        - job_name: dns-aaaa
          dns_sd_configs:
            - names: [v6.infer.test]
              type: AAAA
              port: {pa}
              refresh_interval: 1s
              nameservers: ['127.0.0.1:{port}']
exporters:
  prometheusremotewrite:
    endpoint: {}
service:
  pipelines:
    metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#,
        sink.write_url()
    );
    let mut agent = Agent::start(&cfg);

    // Three targets, with Prometheus' labels, as a real Prometheus stores them.
    let up = |sel: &str| sink.query(&format!("up{{{sel}}}"));
    let found = wait_until("four targets from DNS in Prometheus", Duration::from_secs(30), || {
        let all = up("job=~\"dns-.*\"");
        (all.len() == 4).then_some(all)
    });
    // AAAA: [ip]:port, as Go's JoinHostPort writes it (nothing listens on
    // ::1 here, so up is 0: the address is what is checked).
    let v6 = found.iter().find(|(l, _)| l["job"] == "dns-aaaa").expect("the AAAA target");
    assert_eq!(v6.0["instance"], format!("[::1]:{pa}"));
    let found: Vec<_> = found.into_iter().filter(|(l, _)| l["job"] != "dns-aaaa").collect();
    let labels: Vec<_> = found.iter().map(|(l, _)| l.clone()).collect();
    let srv_a = labels
        .iter()
        .find(|l| l.get("srv_target").map(String::as_str) == Some("a.infer.test."))
        .unwrap_or_else(|| panic!("a's SRV target (with its final dot): {labels:?}"));
    assert_eq!(srv_a["instance"], format!("127.0.0.1:{pa}"));
    assert_eq!(srv_a["dns_name"], "_metrics._tcp.infer.test");
    assert!(labels.iter().any(|l| l.get("srv_target").map(String::as_str) == Some("b.infer.test.")), "{labels:?}");
    let a_rec = labels.iter().find(|l| l["job"] == "dns-a").unwrap();
    assert_eq!(a_rec["instance"], format!("127.0.0.1:{pa}"), "A record: ip:port");
    assert_eq!(a_rec["dns_name"], "vllm.infer.test");
    // One scrape's series travel in several requests (the sending queue
    // shards them by series across its consumers): b's `up` may be stored
    // before its counter. Wait for the counter rather than assume it came
    // with `up`.
    wait_until("b's counter stored", Duration::from_secs(30), || {
        (!sink.query(&format!("dsd_requests_total{{job=\"dns-srv\",instance=\"127.0.0.1:{pb}\"}}")).is_empty())
            .then_some(())
    });

    // The server goes away: lookups fail, the targets stay.
    dns.terminate(Duration::from_secs(5));
    let b_hits = b.hits("/metrics");
    wait_until("failed lookups counted", Duration::from_secs(30), || {
        (agent.self_metric("infertel_receiver_discovery_errors_total", &[("mechanism", "dns"), ("job", "dns-srv")])
            >= 2.0)
            .then_some(())
    });
    std::thread::sleep(Duration::from_millis(1500));
    assert!(b.hits("/metrics") >= b_hits + 3, "b still scraped while DNS is down");

    // Back with b's record removed: b's target ends with staleness markers.
    let only_a: Vec<String> = both.iter().filter(|r| !r.contains("b.infer.test")).cloned().collect();
    let _dns = dnsmasq(port, &only_a, dir.path(), 1);
    let b_inst = format!("127.0.0.1:{pb}");
    // An instant query looks back 5 minutes: only a staleness marker makes
    // b's series vanish from it this soon (Prometheus skips the marker
    // itself in range selections, so it is seen by its effect).
    // (The markers of one target's series may travel in separate requests:
    // both are waited for.)
    wait_until("b's series ended by staleness markers in Prometheus", Duration::from_secs(30), || {
        let gone = |m: &str| sink.query(&format!("{m}{{job=\"dns-srv\",instance=\"{b_inst}\"}}")).is_empty();
        (gone("up") && gone("dsd_requests_total")).then_some(())
    });
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(up(&format!("job=\"dns-srv\",instance=\"127.0.0.1:{pa}\"")).len(), 1, "a is kept");
    assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0), "{}", agent.proc.log_text());
    assert!(agent.proc.log_text().contains("dns_sd _metrics._tcp.infer.test (SRV)"), "{}", agent.proc.log_text());
}
