//! Certificates made at test time for servers that speak TLS: a certificate authority, a
//! server certificate for `127.0.0.1` and `localhost`, and a client certificate, all signed by
//! that authority and written into the server's own directory.

use std::fs;
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    SanType,
};

use crate::{free_port, redis_server_path, server_version};

pub(crate) const CA_CERT: &str = "ca.crt";
pub(crate) const SERVER_CERT: &str = "server.crt";
pub(crate) const SERVER_KEY: &str = "server.key";
pub(crate) const CLIENT_CERT: &str = "client.crt";
pub(crate) const CLIENT_KEY: &str = "client.key";

/// Writes the authority's certificate and the server's and client's certificates and keys
/// into `dir`.
///
/// # Panics
///
/// If a certificate cannot be made or written.
pub(crate) fn write_certificates(dir: &Path) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "fencelock-testkit CA");
    let ca_key = KeyPair::generate().expect("CA key");
    let ca_cert = ca.self_signed(&ca_key).expect("self-signed CA");
    let issuer = Issuer::new(ca, ca_key);

    let mut server =
        CertificateParams::new(vec!["localhost".to_owned()]).expect("server parameters");
    server
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_key = KeyPair::generate().expect("server key");
    let server_cert = server
        .signed_by(&server_key, &issuer)
        .expect("server certificate");

    let mut client = CertificateParams::new(Vec::<String>::new()).expect("client parameters");
    client
        .distinguished_name
        .push(DnType::CommonName, "fencelock-testkit client");
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_key = KeyPair::generate().expect("client key");
    let client_cert = client
        .signed_by(&client_key, &issuer)
        .expect("client certificate");

    for (file, pem) in [
        (CA_CERT, ca_cert.pem()),
        (SERVER_CERT, server_cert.pem()),
        (SERVER_KEY, server_key.serialize_pem()),
        (CLIENT_CERT, client_cert.pem()),
        (CLIENT_KEY, client_key.serialize_pem()),
    ] {
        fs::write(dir.join(file), pem)
            .unwrap_or_else(|e| panic!("cannot write {file} into {}: {e}", dir.display()));
    }
}

/// Whether the server under test speaks TLS, and why not when it does not: some builds (the
/// Redis 6.2 and Valkey 8 that `cargo xtask setup` fetches) are made without it. Probed once
/// per process by starting the server with a TLS port and the kit's certificates; tests that
/// need TLS skip themselves with the reason.
///
/// # Panics
///
/// If the server binary cannot be found or started at all, or a temporary directory cannot be
/// made.
pub fn tls_support() -> Result<(), String> {
    static SUPPORT: OnceLock<Result<(), String>> = OnceLock::new();
    SUPPORT.get_or_init(probe_tls).clone()
}

/// How long the probe waits for the TLS port to open.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// Probes on other ports when the chosen one turned out to be taken.
const PROBE_ATTEMPTS: u32 = 3;

fn probe_tls() -> Result<(), String> {
    let dir = tempfile::Builder::new()
        .prefix("fencelock-tls-probe-")
        .tempdir()
        .expect("cannot create a temporary directory for the TLS probe");
    write_certificates(dir.path());
    let mut outcome = Err("not probed".to_owned());
    for _ in 0..PROBE_ATTEMPTS {
        outcome = probe_tls_on(dir.path(), free_port());
        if !outcome
            .as_ref()
            .is_err_and(|reason| reason.contains("already in use"))
        {
            break;
        }
    }
    outcome
}

/// Starts the server with only a TLS port, on `port`; `Ok` once the port accepts connections,
/// the server's last words when it exits instead.
fn probe_tls_on(dir: &Path, port: u16) -> Result<(), String> {
    let output = dir.join(format!("probe-{port}.log"));
    let log = fs::File::create(&output).expect("cannot create the TLS probe's log");
    let file = |name: &str| dir.join(name).display().to_string();
    let mut child = Command::new(redis_server_path())
        .args(["--port", "0", "--tls-port", &port.to_string()])
        .args(["--tls-cert-file", &file(SERVER_CERT)])
        .args(["--tls-key-file", &file(SERVER_KEY)])
        .args(["--tls-ca-cert-file", &file(CA_CERT)])
        .args(["--save", "", "--appendonly", "no"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("cannot share the TLS probe's log"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", redis_server_path().display()));
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let outcome = loop {
        if let Ok(Some(_)) = child.try_wait() {
            let said = fs::read_to_string(&output).unwrap_or_default();
            let last = said.lines().rev().find(|l| !l.trim().is_empty());
            break Err(format!(
                "{} has no TLS: {}",
                server_version(),
                last.unwrap_or("it exited without a word").trim()
            ));
        }
        if TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok() {
            break Ok(());
        }
        if Instant::now() >= deadline {
            break Err(format!(
                "{} did not open its TLS port within {PROBE_TIMEOUT:?}",
                server_version()
            ));
        }
        thread::sleep(Duration::from_millis(20));
    };
    let _ = child.kill();
    let _ = child.wait();
    outcome
}
