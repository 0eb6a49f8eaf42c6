//! `systems.<name>.schema_registry` and the Avro formats: which encoding a
//! Kafka system's messages have and where their writer schemas come from
//! (docs/avro.md).

use std::time::Duration;

use super::cx::{Cx, Mapping};
use super::units::parse_duration;
use super::{Format, SchemaRegistry};

/// How long one registry request may take before it counts as a failure
/// (and is retried, the partition waiting).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a Kafka system's `format:` names: the envelope, and whether the
/// messages are Avro (`debezium-avro`, `avro`) rather than JSON.
pub(super) fn kafka_format(name: &str) -> Option<(Format, bool)> {
    match name {
        "debezium-avro" => Some((Format::Debezium, true)),
        "avro" => Some((Format::Json, true)),
        other => Format::parse(other).map(|f| (f, false)),
    }
}

impl Cx {
    /// `schema_registry`, required by the Avro formats and refused by the
    /// others.
    pub(super) fn schema_registry(
        &mut self,
        m: &Mapping,
        path: &str,
        avro: bool,
    ) -> Option<SchemaRegistry> {
        let rp = format!("{path}.schema_registry");
        let Some(v) = m.get("schema_registry") else {
            if avro {
                self.err(
                    &rp,
                    "missing: the Avro formats need the registry their schemas are in, e.g. { url: \"http://registry:8081\" }",
                );
            }
            return None;
        };
        let r = self.map(
            v,
            &rp,
            &[
                "url",
                "username",
                "password",
                "ca_location",
                "certificate_location",
                "key_location",
                "timeout",
            ],
        );
        if !avro {
            self.err(&rp, "only the Avro formats (debezium-avro, avro) read a schema registry");
            return None;
        }
        let url = self.opt_string(&r, "url", &rp).unwrap_or_default();
        match url::Url::parse(&url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => {}
            _ => self.err(
                &format!("{rp}.url"),
                format!("`{url}` is not an http(s) URL, e.g. http://registry:8081"),
            ),
        }
        let username = self.opt_string(&r, "username", &rp);
        let password = self.opt_string(&r, "password", &rp);
        if password.is_some() && username.is_none() {
            self.err(&format!("{rp}.password"), "set with no username");
        }
        let certificate_location = self.opt_string(&r, "certificate_location", &rp);
        let key_location = self.opt_string(&r, "key_location", &rp);
        if certificate_location.is_some() != key_location.is_some() {
            self.err(&rp, "certificate_location and key_location go together (mutual TLS)");
        }
        let timeout = match self.opt_string(&r, "timeout", &rp) {
            None => DEFAULT_TIMEOUT,
            Some(t) => match parse_duration(&t) {
                Some(d) if !d.is_zero() => d,
                _ => {
                    self.err(
                        &format!("{rp}.timeout"),
                        format!("`{t}` is not a duration, e.g. 10s"),
                    );
                    DEFAULT_TIMEOUT
                }
            },
        };
        Some(SchemaRegistry {
            url,
            username,
            password,
            ca_location: self.opt_string(&r, "ca_location", &rp),
            certificate_location,
            key_location,
            timeout,
        })
    }
}
