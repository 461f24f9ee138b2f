//! TLS of the connections the store opens from a URL: `sslmode` and `sslrootcert` read as
//! libpq reads them, carried out with rustls (feature `tls`).
//!
//! tokio-postgres knows `sslmode=disable|prefer|require` only, so this module takes
//! `sslmode` and `sslrootcert` out of the connection string before tokio-postgres parses the
//! rest, and builds the rustls configuration they ask for:
//!
//! | `sslmode` | TLS | certificate check |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (default) | when the server offers it, else plain | as `require` |
//! | `require` | always | none; the chain against the root CA when there is one (as libpq) |
//! | `verify-ca` | always | the chain against the root CA |
//! | `verify-full` | always | the chain, and the host name (or IP) against the certificate |
//!
//! The root CA is `sslrootcert=<PEM file>`, `sslrootcert=system` (the system's roots), or
//! else `~/.postgresql/root.crt` when that file exists, as with libpq.

use std::path::PathBuf;

/// What `sslmode` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// Where the trusted roots come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Roots {
    /// No root CA: `prefer` and `require` then encrypt without checking the certificate.
    None,
    /// A PEM file of CA certificates.
    File(PathBuf),
    /// The system's roots (`sslrootcert=system`).
    System,
}

/// The TLS settings of one connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) mode: Mode,
    pub(crate) roots: Roots,
}

/// Parses a connection string (URL or `key=value` list) into the driver's configuration and
/// the TLS settings. The error is the reason, for [`crate::PostgresError::InvalidUrl`].
pub(crate) fn parse(url: &str) -> Result<(tokio_postgres::Config, Settings), String> {
    let (rest, sslmode, sslrootcert) = split(url)?;
    let mut config: tokio_postgres::Config = rest.parse().map_err(|e: tokio_postgres::Error| {
        // The driver's message leaves its cause out of `Display`.
        match std::error::Error::source(&e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        }
    })?;
    let mode = match sslmode.as_deref() {
        None | Some("prefer") => Mode::Prefer,
        Some("disable") => Mode::Disable,
        Some("require") => Mode::Require,
        Some("verify-ca") => Mode::VerifyCa,
        Some("verify-full") => Mode::VerifyFull,
        Some("allow") => {
            return Err(
                "sslmode=allow is not supported: use disable, prefer, require, \
                        verify-ca or verify-full"
                    .into(),
            );
        }
        Some(other) => {
            return Err(format!(
                "sslmode={other:?} is not a TLS mode: use disable, prefer, require, verify-ca \
                 or verify-full"
            ));
        }
    };
    let roots = match sslrootcert.as_deref() {
        Some("system") => Roots::System,
        Some("") => return Err("sslrootcert is empty: name a PEM file of CA certificates".into()),
        Some(path) => Roots::File(PathBuf::from(path)),
        None => default_root_file().map_or(Roots::None, Roots::File),
    };
    if matches!(mode, Mode::VerifyCa | Mode::VerifyFull) && roots == Roots::None {
        return Err(format!(
            "sslmode={} checks the server's certificate and needs the CA that signed it: add \
             sslrootcert=/path/to/ca.crt (or sslrootcert=system for the system's roots)",
            if mode == Mode::VerifyCa {
                "verify-ca"
            } else {
                "verify-full"
            }
        ));
    }
    if !cfg!(feature = "tls") && matches!(mode, Mode::Require | Mode::VerifyCa | Mode::VerifyFull) {
        return Err(
            "TLS was asked for (sslmode), but this build of anarchon-postgres has no `tls` \
             feature: enable it (it is on by default), or use sslmode=disable"
                .into(),
        );
    }
    config.ssl_mode(match mode {
        Mode::Disable => tokio_postgres::config::SslMode::Disable,
        Mode::Prefer => tokio_postgres::config::SslMode::Prefer,
        Mode::Require | Mode::VerifyCa | Mode::VerifyFull => {
            tokio_postgres::config::SslMode::Require
        }
    });
    Ok((config, Settings { mode, roots }))
}

/// libpq's default root file, `~/.postgresql/root.crt`, when it exists.
fn default_root_file() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    let file = PathBuf::from(home).join(".postgresql").join("root.crt");
    file.is_file().then_some(file)
}

/// Takes `sslmode` and `sslrootcert` out of a connection string: the rest, and their values
/// (the last one given wins, as with libpq).
#[allow(clippy::type_complexity)]
fn split(url: &str) -> Result<(String, Option<String>, Option<String>), String> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((head, query)) = url.split_once('?') else {
            return Ok((url.to_owned(), None, None));
        };
        let (mut mode, mut root) = (None, None);
        let mut kept = Vec::new();
        for pair in query.split('&') {
            let taken = match pair.split_once('=') {
                Some((key, value)) => match decode(key).as_deref() {
                    Ok("sslmode") => {
                        mode = Some(decode(value)?);
                        true
                    }
                    Ok("sslrootcert") => {
                        root = Some(decode(value)?);
                        true
                    }
                    _ => false,
                },
                None => false,
            };
            if !taken {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            head.to_owned()
        } else {
            format!("{head}?{}", kept.join("&"))
        };
        return Ok((rest, mode, root));
    }
    // A `key=value` list: rewritten only when it names one of the two, so that every other
    // string reaches the driver's parser (and its messages) untouched.
    if !url.contains("sslmode") && !url.contains("sslrootcert") {
        return Ok((url.to_owned(), None, None));
    }
    let (mut mode, mut root) = (None, None);
    let mut rest = String::new();
    for (key, value) in key_values(url)? {
        match key.as_str() {
            "sslmode" => mode = Some(value),
            "sslrootcert" => root = Some(value),
            _ => {
                if !rest.is_empty() {
                    rest.push(' ');
                }
                rest.push_str(&key);
                rest.push_str("='");
                for c in value.chars() {
                    if c == '\'' || c == '\\' {
                        rest.push('\\');
                    }
                    rest.push(c);
                }
                rest.push('\'');
            }
        }
    }
    Ok((rest, mode, root))
}

/// Percent-decodes a URL query part into UTF-8.
fn decode(part: &str) -> Result<String, String> {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(byte) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).map_err(|_| format!("{part:?} is not UTF-8 once percent-decoded"))
}

/// Splits a libpq `key=value` list (values may be single-quoted; `\` escapes a character).
///
/// The errors name a parameter by its position, never by its text: in a password with a
/// space left unquoted (`password=two words`) the second word reads as a parameter name.
pub(crate) fn key_values(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut it = s.chars().peekable();
    loop {
        while it.next_if(|c| c.is_whitespace()).is_some() {}
        let mut key = String::new();
        while let Some(c) = it.next_if(|c| !c.is_whitespace() && *c != '=') {
            key.push(c);
        }
        if key.is_empty() {
            if it.peek().is_some() {
                return Err(format!(
                    "parameter {} has no name before its `=`",
                    out.len() + 1
                ));
            }
            return Ok(out);
        }
        while it.next_if(|c| c.is_whitespace()).is_some() {}
        if it.next() != Some('=') {
            return Err(format!(
                "parameter {} has no `=` and value (quote a value that holds a space: \
                 password='two words')",
                out.len() + 1
            ));
        }
        while it.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if it.next_if_eq(&'\'').is_some() {
            loop {
                match it.next() {
                    None => {
                        return Err(format!(
                            "the quoted value of parameter {} is not closed",
                            out.len() + 1
                        ));
                    }
                    Some('\'') => break,
                    Some('\\') => value.extend(it.next()),
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = it.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(it.next());
                } else {
                    value.push(c);
                }
            }
            if value.is_empty() {
                return Err(format!("parameter {} has no value", out.len() + 1));
            }
        }
        out.push((key, value));
    }
}

/// The connector of the connections the store opens.
#[cfg(feature = "tls")]
pub(crate) type Connector = tokio_postgres_rustls::MakeRustlsConnect;
/// The connector of the connections the store opens (no `tls` feature: plain only).
#[cfg(not(feature = "tls"))]
pub(crate) type Connector = tokio_postgres::NoTls;

/// Another handle on `connector` (a clone of the rustls one, a copy of `NoTls`).
#[cfg_attr(not(feature = "tls"), allow(clippy::clone_on_copy))]
pub(crate) fn share(connector: &Connector) -> Connector {
    connector.clone()
}

/// The connector for `settings`; reads the root CA file now, so a wrong path fails at once.
#[cfg(not(feature = "tls"))]
pub(crate) fn connector(_settings: &Settings) -> Result<Connector, String> {
    Ok(tokio_postgres::NoTls)
}

/// The connector for `settings`; reads the root CA file now, so a wrong path fails at once.
#[cfg(feature = "tls")]
pub(crate) fn connector(settings: &Settings) -> Result<Connector, String> {
    use std::sync::Arc;

    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut store = rustls::RootCertStore::empty();
    match &settings.roots {
        Roots::None => {}
        Roots::File(path) => {
            let shown = path.display();
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("sslrootcert {shown}: cannot read it: {e}"))?;
            for cert in certs {
                let cert = cert.map_err(|e| format!("sslrootcert {shown}: not PEM: {e}"))?;
                store.add(cert).map_err(|e| {
                    format!("sslrootcert {shown}: not a usable CA certificate: {e}")
                })?;
            }
            if store.is_empty() {
                return Err(format!("sslrootcert {shown} holds no certificate"));
            }
        }
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(
                    "sslrootcert=system: no root certificate found on this system".to_owned(),
                );
            }
        }
    }
    let checked = settings.roots != Roots::None && settings.mode != Mode::Disable;
    let verifier: Arc<dyn ServerCertVerifier> = if checked {
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
            .build()
            .map_err(|e| format!("the root certificates cannot be used: {e}"))?;
        if settings.mode == Mode::VerifyFull {
            webpki
        } else {
            Arc::new(verify::ChainOnly(webpki))
        }
    } else {
        Arc::new(verify::Unchecked(provider.clone()))
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// The two weaker certificate checks libpq has.
#[cfg(feature = "tls")]
mod verify {
    use std::sync::Arc;

    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};

    /// `prefer` / `require` without a root CA: encrypted, the certificate not checked (the
    /// handshake's signatures still are).
    #[derive(Debug)]
    pub(super) struct Unchecked(pub(super) Arc<CryptoProvider>);

    impl ServerCertVerifier for Unchecked {
        fn verify_server_cert(
            &self,
            _end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            _server_name: &ServerName<'_>,
            _ocsp: &[u8],
            _now: UnixTime,
        ) -> Result<ServerCertVerified, Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            verify_tls12_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            verify_tls13_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }

    /// `verify-ca` (and `prefer` / `require` with a root CA): the chain is checked, the
    /// host name is not.
    #[derive(Debug)]
    pub(super) struct ChainOnly(pub(super) Arc<WebPkiServerVerifier>);

    impl ServerCertVerifier for ChainOnly {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, Error> {
            // webpki checks the chain first: a name error means the chain was good.
            match self
                .0
                .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
            {
                Err(Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            self.0.verify_tls12_signature(message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            self.0.verify_tls13_signature(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.supported_verify_schemes()
        }
    }
}

/// A failed TLS handshake, with the cause the driver's message leaves out and what to do.
#[derive(Debug, thiserror::Error)]
#[error("TLS handshake failed: {cause}; {hint}")]
pub(crate) struct HandshakeFailed {
    cause: String,
    hint: &'static str,
    #[source]
    source: tokio_postgres::Error,
}

/// `Ok` when `e` is a failed TLS handshake (a refused certificate, a server without TLS);
/// any other error comes back as it was.
pub(crate) fn handshake_failed(
    e: tokio_postgres::Error,
) -> Result<HandshakeFailed, tokio_postgres::Error> {
    // tokio-postgres' `Display` of a TLS error is exactly this; its cause is the source.
    if e.to_string() != "error performing TLS handshake" {
        return Err(e);
    }
    let cause = std::error::Error::source(&e)
        .map(|c| c.to_string())
        .unwrap_or_else(|| "unknown cause".into());
    let hint = if cause.contains("certificate") || cause.contains("Certificate") {
        "the server's certificate was refused: sslrootcert must name the CA that signed it, and \
         with sslmode=verify-full the host must be a name or IP the certificate lists"
    } else if cause.contains("does not support TLS") {
        "the server does not accept TLS (ssl = off): turn it on, or use sslmode=prefer or disable"
    } else {
        "check the server's TLS settings and the URL's sslmode"
    };
    Ok(HandshakeFailed {
        cause,
        hint,
        source: e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(url: &str) -> Result<Mode, String> {
        parse(url).map(|(_, s)| s.mode)
    }

    #[test]
    fn sslmode_is_read_from_urls_and_key_value_lists() {
        assert_eq!(mode("postgres://u@h/db"), Ok(Mode::Prefer));
        assert_eq!(mode("postgres://u@h/db?sslmode=disable"), Ok(Mode::Disable));
        assert_eq!(mode("host=h sslmode=disable"), Ok(Mode::Disable));
        assert!(mode("postgres://u@h/db?sslmode=allow").is_err());
        assert!(mode("postgres://u@h/db?sslmode=bogus").is_err());
        if cfg!(feature = "tls") {
            assert_eq!(
                mode("postgres://u@h/db?sslmode=verify-full&sslrootcert=/x/ca.crt"),
                Ok(Mode::VerifyFull)
            );
            assert_eq!(
                mode("host=h sslmode = verify-ca sslrootcert='/a b/ca.crt' user=u"),
                Ok(Mode::VerifyCa)
            );
        }
    }

    #[test]
    #[cfg(not(feature = "tls"))]
    fn without_the_tls_feature_only_plain_modes_are_accepted() {
        let err = mode("postgres://u@h/db?sslmode=require").unwrap_err();
        assert!(err.contains("`tls` feature"), "{err}");
        assert_eq!(mode("postgres://u@h/db?sslmode=prefer"), Ok(Mode::Prefer));
    }

    #[test]
    fn verify_modes_need_a_root_ca() {
        let err = mode("postgres://u@h/db?sslmode=verify-full").unwrap_err();
        assert!(err.contains("sslrootcert"), "{err}");
    }

    #[test]
    #[cfg(feature = "tls")]
    fn the_other_parameters_reach_the_driver() {
        let (config, settings) =
            parse("postgres://u@h:5433/db?application_name=x&sslrootcert=%2Fa%20b%2Fca.crt&sslmode=verify-ca")
                .unwrap();
        assert_eq!(config.get_application_name(), Some("x"));
        assert_eq!(config.get_ports(), [5433]);
        assert_eq!(settings.roots, Roots::File(PathBuf::from("/a b/ca.crt")));
        let (config, settings) =
            parse(r"host=h user='o\'brien' sslrootcert=system sslmode=verify-full password=p\ q")
                .unwrap();
        assert_eq!(config.get_user(), Some("o'brien"));
        assert_eq!(config.get_password(), Some(&b"p q"[..]));
        assert_eq!(settings.roots, Roots::System);
        assert_eq!(
            config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
    }

    #[test]
    fn broken_strings_are_errors_not_panics() {
        for s in [
            "host=h sslmode='x",
            "host=h sslmode",
            "=x sslmode=require",
            "postgres://h/db?sslmode=%ff",
            "postgres://h/db?sslmode=%",
            "postgres://h/db?sslmode",
        ] {
            let _ = parse(s);
        }
    }
}
