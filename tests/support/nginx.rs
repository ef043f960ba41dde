//! A real nginx (Debian's `/usr/sbin/nginx`) as an auth/TLS front, run
//! unprivileged from a tempdir, plus a throwaway PKI made with the
//! `openssl` CLI (CA, server certificates, client certificate) and an
//! htpasswd file.
//!
//! nginx runs with `master_process off` and `daemon off`: one process,
//! no privilege drop to `nobody` (which could not read the tempdir when
//! the tests run as root) and no orphaned workers when the harness kills
//! it by PID on drop.

use super::{Proc, free_port, require, wait_until};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Runs a command, panicking with its stderr when it fails.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A certificate and its key, both PEM files.
#[derive(Clone, Debug)]
pub struct CertPair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A throwaway CA and certificates it signed, in a tempdir.
pub struct Pki {
    pub dir: tempfile::TempDir,
    /// The CA certificate (what `ca_file` points at).
    pub ca: PathBuf,
    /// Server certificate for 127.0.0.1 and localhost (SAN).
    pub server: CertPair,
    /// Server certificate for `other.invalid` only, signed by the same CA.
    pub other: CertPair,
    /// Client certificate (extendedKeyUsage clientAuth) for mTLS.
    pub client: CertPair,
}

impl Pki {
    pub fn generate() -> Pki {
        let openssl = require("openssl");
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let ca = d.join("ca.pem");
        let ca_key = d.join("ca.key");
        run(Command::new(&openssl).current_dir(d).args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=infertel test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ]));
        let leaf = |name: &str, cn: &str, ext: &str| -> CertPair {
            let key = d.join(format!("{name}.key"));
            let cert = d.join(format!("{name}.pem"));
            let csr = d.join(format!("{name}.csr"));
            let extfile = d.join(format!("{name}.ext"));
            std::fs::write(&extfile, ext).expect("write extfile");
            run(Command::new(&openssl)
                .current_dir(d)
                .args(["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj"])
                .arg(format!("/CN={cn}"))
                .arg("-keyout")
                .arg(&key)
                .arg("-out")
                .arg(&csr));
            run(Command::new(&openssl)
                .current_dir(d)
                .args(["x509", "-req", "-days", "2", "-CAcreateserial", "-in"])
                .arg(&csr)
                .arg("-CA")
                .arg(&ca)
                .arg("-CAkey")
                .arg(&ca_key)
                .arg("-extfile")
                .arg(&extfile)
                .arg("-out")
                .arg(&cert));
            CertPair { cert, key }
        };
        let server = leaf(
            "server",
            "127.0.0.1",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        );
        let other = leaf(
            "other",
            "other.invalid",
            "subjectAltName=DNS:other.invalid\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        );
        let client = leaf(
            "client",
            "infertel-agent",
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n",
        );
        Pki { dir, ca, server, other, client }
    }
}

/// Writes an htpasswd file (apr1 hash from `openssl passwd -apr1`) with one user.
pub fn htpasswd(path: &Path, user: &str, password: &str) {
    let hash = run(Command::new(require("openssl")).args(["passwd", "-apr1", password]));
    std::fs::write(path, format!("{user}:{}\n", hash.trim())).expect("write htpasswd");
}

/// A running nginx; killed by PID on drop (through `Proc`).
pub struct Nginx {
    pub proc: Proc,
    pub dir: tempfile::TempDir,
}

impl Nginx {
    /// A free loopback port for a `listen` directive.
    pub fn port() -> u16 {
        free_port()
    }

    /// Starts nginx with `http_body` inside its `http {}` block (server
    /// blocks, log formats; `{{DIR}}` is replaced by the nginx directory,
    /// which also holds `access.log`) and waits until every port in
    /// `ports` accepts connections.
    pub fn start(http_body: &str, ports: &[u16]) -> Nginx {
        let bin = require("nginx");
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path().display().to_string();
        let body = http_body.replace("{{DIR}}", &d);
        let conf = format!(
            r#"master_process off;
worker_processes 1;
pid {d}/nginx.pid;
lock_file {d}/nginx.lock;
error_log {d}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    default_type text/plain;
    client_max_body_size 16m;
{body}
}}
"#
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, &conf).expect("write nginx.conf");
        let mut cmd = Command::new(bin);
        // -e: the startup error log, before nginx.conf is read (Debian's
        // default would be stderr, which the Proc log captures anyway).
        cmd.arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-c")
            .arg(&conf_path)
            .arg("-g")
            .arg("daemon off;");
        let mut proc = Proc::spawn("nginx", &mut cmd, dir.path().join("nginx.stdout.log"));
        let error_log = dir.path().join("error.log");
        wait_until("nginx listening", Duration::from_secs(15), || {
            if let Ok(Some(st)) = proc.child.try_wait() {
                panic!(
                    "nginx exited with {st} before listening:\n{}\n{}\n--- nginx.conf ---\n{conf}",
                    proc.log_text(),
                    std::fs::read_to_string(&error_log).unwrap_or_default()
                );
            }
            ports
                .iter()
                .all(|p| TcpStream::connect_timeout(&([127, 0, 0, 1], *p).into(), Duration::from_millis(200)).is_ok())
                .then_some(())
        });
        Nginx { proc, dir }
    }

    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }

    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    /// Both logs, for failure messages.
    pub fn logs(&self) -> String {
        format!("--- nginx access.log ---\n{}--- nginx error.log ---\n{}", self.access_log(), self.error_log())
    }
}
