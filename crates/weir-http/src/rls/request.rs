//! The edge's checks of a `RateLimitRequest`: every bound of `weir_core::bounds` that
//! applies, before anything is matched or sent. A refusal names the field, as a path into
//! the request (`descriptors[2].entries[0].value`).

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use weir_core::bounds::{
    KEY_BYTES_MAX, NAME_BYTES_MAX, RLS_DESCRIPTORS_MAX, RLS_ENTRIES_MAX, UNITS_MAX,
};
use weir_core::rls::unit_seconds;

/// One descriptor as the rest of the module reads it: its entries and its hits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    pub entries: Vec<(String, String)>,
    /// Units to take: the descriptor's `hits_addend` when set, else the request's; 0 is 1,
    /// as Envoy counts it.
    pub hits: u32,
    /// The descriptor's `limit` override: requests per unit, and the unit in seconds.
    pub limit: Option<(u32, u64)>,
    /// `is_negative_hits`: the hits go back to the bucket instead of being taken.
    pub negative: bool,
}

/// A checked request: the tenant (the domain) and its descriptors, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    pub tenant: String,
    pub descriptors: Vec<Descriptor>,
}

/// Hits as units: 0 is 1, at most `UNITS_MAX`.
fn hits(field: &str, value: u64) -> Result<u32, String> {
    match value {
        0 => Ok(1),
        v if v <= UNITS_MAX as u64 => Ok(v as u32),
        v => Err(format!("{field} is {v}, above the bound of {UNITS_MAX}")),
    }
}

/// Checks `request`, naming the first field out of bounds.
pub fn check(request: RateLimitRequest) -> Result<Checked, String> {
    if request.domain.is_empty() || request.domain.len() > NAME_BYTES_MAX {
        return Err(format!(
            "domain is {} bytes, not in 1..={NAME_BYTES_MAX}",
            request.domain.len()
        ));
    }
    if request.descriptors.len() > RLS_DESCRIPTORS_MAX {
        return Err(format!(
            "descriptors has {} entries, the bound is {RLS_DESCRIPTORS_MAX}",
            request.descriptors.len()
        ));
    }
    let request_hits = hits("hits_addend", request.hits_addend as u64)?;
    let mut descriptors = Vec::with_capacity(request.descriptors.len());
    for (i, d) in request.descriptors.into_iter().enumerate() {
        if d.entries.is_empty() || d.entries.len() > RLS_ENTRIES_MAX {
            return Err(format!(
                "descriptors[{i}].entries has {} entries, not in 1..={RLS_ENTRIES_MAX}",
                d.entries.len()
            ));
        }
        let limit = match &d.limit {
            None => None,
            Some(o) => {
                let unit = RateLimitUnit::try_from(o.unit)
                    .ok()
                    .and_then(|u| unit_seconds(u.as_str_name()))
                    .ok_or_else(|| {
                        format!("descriptors[{i}].limit.unit {} is no unit of time", o.unit)
                    })?;
                Some((o.requests_per_unit, unit))
            }
        };
        let mut entries = Vec::with_capacity(d.entries.len());
        for (j, e) in d.entries.into_iter().enumerate() {
            for (what, text) in [("key", &e.key), ("value", &e.value)] {
                if text.is_empty() || text.len() > KEY_BYTES_MAX {
                    return Err(format!(
                        "descriptors[{i}].entries[{j}].{what} is {} bytes, not in \
                         1..={KEY_BYTES_MAX}",
                        text.len()
                    ));
                }
            }
            entries.push((e.key, e.value));
        }
        let hits = match d.hits_addend {
            Some(h) => hits(&format!("descriptors[{i}].hits_addend"), h.value)?,
            None => request_hits,
        };
        descriptors.push(Descriptor {
            entries,
            hits,
            limit,
            negative: d.is_negative_hits,
        });
    }
    Ok(Checked {
        tenant: request.domain,
        descriptors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use envoy_types::pb::google::protobuf::UInt64Value;

    fn descriptor(entries: &[(&str, &str)], hits: Option<u64>) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| Entry {
                    key: k.to_string(),
                    value: v.to_string(),
                })
                .collect(),
            hits_addend: hits.map(|value| UInt64Value { value }),
            ..Default::default()
        }
    }

    fn request(descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
        RateLimitRequest {
            domain: "d".into(),
            descriptors,
            hits_addend: hits,
        }
    }

    #[test]
    fn hits_are_the_descriptors_else_the_requests_and_zero_is_one() {
        let checked = check(request(
            vec![
                descriptor(&[("k", "v")], None),
                descriptor(&[("k", "w")], Some(7)),
                descriptor(&[("k", "x")], Some(0)),
            ],
            0,
        ))
        .unwrap();
        let hits: Vec<u32> = checked.descriptors.iter().map(|d| d.hits).collect();
        assert_eq!(hits, [1, 7, 1]);
        let checked = check(request(vec![descriptor(&[("k", "v")], None)], 3)).unwrap();
        assert_eq!(checked.descriptors[0].hits, 3);
    }

    #[test]
    fn each_bound_is_refused_naming_its_field() {
        let refused = |r: RateLimitRequest| check(r).unwrap_err();
        let mut r = request(vec![], 1);
        r.domain = "x".repeat(129);
        assert!(refused(r).starts_with("domain is 129 bytes"));
        let many = vec![descriptor(&[("k", "v")], None); RLS_DESCRIPTORS_MAX + 1];
        assert!(refused(request(many, 1)).starts_with("descriptors has 17 entries"));
        let deep: Vec<(&str, &str)> = vec![("k", "v"); RLS_ENTRIES_MAX + 1];
        let e = refused(request(
            vec![descriptor(&[("k", "v")], None), descriptor(&deep, None)],
            1,
        ));
        assert!(e.starts_with("descriptors[1].entries has 9 entries"), "{e}");
        assert!(refused(request(vec![descriptor(&[], None)], 1)).contains("has 0 entries"));
        let long = "v".repeat(KEY_BYTES_MAX + 1);
        let e = refused(request(
            vec![descriptor(&[("a", "b"), ("k", &long)], None)],
            1,
        ));
        assert!(
            e.starts_with("descriptors[0].entries[1].value is 129 bytes"),
            "{e}"
        );
        let e = refused(request(vec![descriptor(&[("", "v")], None)], 1));
        assert!(
            e.starts_with("descriptors[0].entries[0].key is 0 bytes"),
            "{e}"
        );
        let e = refused(request(vec![descriptor(&[("k", "v")], Some(1 << 31))], 1));
        assert!(
            e.starts_with("descriptors[0].hits_addend is 2147483648"),
            "{e}"
        );
    }

    #[test]
    fn negative_hits_are_read_with_their_hits() {
        let mut negative = descriptor(&[("k", "v")], Some(3));
        negative.is_negative_hits = true;
        let checked = check(request(vec![negative, descriptor(&[("k", "v")], None)], 2)).unwrap();
        let read: Vec<(u32, bool)> = checked
            .descriptors
            .iter()
            .map(|d| (d.hits, d.negative))
            .collect();
        assert_eq!(read, [(3, true), (2, false)]);
    }
}
