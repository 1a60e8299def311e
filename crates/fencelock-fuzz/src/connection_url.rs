//! `connection_url`: the addresses and TLS certificates fencelock's `connect` functions take,
//! through the checks they make before opening a connection.
//!
//! Input: a first line naming the deployment (`single`, `redlock`, `cluster` or
//! `sentinel SERVICE`), then one URL a line. A blank line ends the URLs; what follows is a
//! CA certificate (PEM), and after a further blank line a client certificate, and after
//! another its key.

use fencelock::fuzzing::{open_cluster, open_redlock, open_sentinel, open_single};
use fencelock::{ClientOptions, SentinelOptions};

/// Checks the deployment as `connect` would: a target is either accepted or refused as bad
/// input, never taken for an unreachable server.
pub fn connection_url(input: &[u8]) {
    let text = String::from_utf8_lossy(input);
    let (targets, certificates) = text.split_once("\n\n").unwrap_or((&text, ""));
    let mut lines = targets.lines();
    let kind = lines.next().unwrap_or_default();
    let urls: Vec<&str> = lines.collect();
    let options = with_certificates(ClientOptions::default(), certificates);
    let checked = match kind.split_once(' ').unwrap_or((kind, "")) {
        ("redlock", _) => open_redlock(&urls, &options),
        ("cluster", _) => open_cluster(&urls, &options),
        ("sentinel", service) => {
            open_sentinel(&urls, service, &SentinelOptions::default(), &options)
        }
        _ => urls.iter().try_for_each(|url| open_single(url, &options)),
    };
    refused_as_bad_input(checked);
}

/// The options with the CA, client certificate and key found in `pem`, separated by blank
/// lines, as far as there are any.
fn with_certificates(options: ClientOptions, pem: &str) -> ClientOptions {
    let mut parts = pem.splitn(3, "\n\n");
    let options = match parts.next() {
        Some(ca) if !ca.is_empty() => options.tls_root_certificate(ca),
        _ => options,
    };
    match (parts.next(), parts.next()) {
        (Some(cert), Some(key)) => options.tls_client_certificate(cert, key),
        _ => options,
    }
}

/// Panics unless `checked` is a success or an error that says the input was bad: an option
/// out of range, or unusable connection settings, which the command line reports as a usage
/// error. An error taken for an unreachable server would be retried for ever.
pub(crate) fn refused_as_bad_input(checked: fencelock::Result<()>) {
    if let Err(refused) = checked {
        assert!(
            matches!(refused, fencelock::Error::InvalidOption { .. }) || refused.is_bad_target(),
            "not refused as bad input: {refused:?}"
        );
        assert!(
            !refused.is_unavailable(),
            "taken for unavailable: {refused:?}"
        );
    }
}
