//! Certificates made at test time for servers that speak TLS: a certificate authority, a
//! server certificate for `127.0.0.1` and `localhost`, and a client certificate, all signed by
//! that authority and written into the server's own directory.

use std::fs;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    SanType,
};

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
        .push(DnType::CommonName, "relock-testkit CA");
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
        .push(DnType::CommonName, "relock-testkit client");
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
