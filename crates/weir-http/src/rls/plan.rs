//! Which limit each descriptor of a checked request is decided on: a [`Plan`], made on
//! this node's applied state (definitions change rarely; the take itself is decided by the
//! leader's machine, which refuses a part whose limit is gone).

use weir_core::machine::limit::LimitSpec;
use weir_core::machine::{Machine, Part};
use weir_core::rls::path::{Matched, override_key, override_name, replaced, resolve};

use super::request::{Checked, Descriptor};

/// What a descriptor is decided on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// No limit of the tenant matches: OK, uncharged.
    Unmatched,
    /// A limit without a rate (an `unlimited` or inner node), or one a matched `replaces`
    /// rule drops: OK, uncharged.
    Unlimited,
    /// Part `n` of the take.
    Part(usize),
    /// Part `n` of the return (`is_negative_hits`): its hits go back to the bucket.
    Return(usize),
}

/// A request's decision plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub tenant: String,
    /// One per descriptor, in order.
    pub targets: Vec<Target>,
    /// The take's parts: distinct (limit, key), hits summed.
    pub parts: Vec<Part>,
    /// The return's parts (descriptors with negative hits): distinct (limit, key), hits
    /// summed.
    pub returns: Vec<Part>,
    /// The override limits `(requests, unit seconds)` the parts name that this node does
    /// not have yet: made (`DefineOverride`) before the take.
    pub overrides: Vec<(u32, u64)>,
}

/// Matches every descriptor of `request` on `machine`; an error names a limit a take cannot
/// decide.
pub fn plan(machine: &Machine, request: &Checked) -> Result<Plan, String> {
    let tenant = request.tenant.as_str();
    let exists = |name: &str| machine.has_limit(tenant, name);
    let matched: Vec<Option<Matched<'_>>> = request
        .descriptors
        .iter()
        .map(|d| {
            let entries: Vec<(&str, &str)> = d
                .entries
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            resolve(&entries, exists)
        })
        .collect();
    let rated: Vec<&Matched<'_>> = matched
        .iter()
        .flatten()
        .filter(|m| rates(machine, tenant, m))
        .collect();
    let dropped = replaced(&rated, exists);
    let mut plan = Plan {
        tenant: request.tenant.clone(),
        targets: Vec::with_capacity(matched.len()),
        parts: Vec::new(),
        returns: Vec::new(),
        overrides: Vec::new(),
    };
    for (i, m) in matched.iter().enumerate() {
        let d = &request.descriptors[i];
        if let Some(limit) = d.limit
            && !same_rate(machine, tenant, m.as_ref(), limit)
        {
            let target = plan.add_override(machine, i, d, limit)?;
            plan.targets.push(target);
            continue;
        }
        let target = match m {
            None => Target::Unmatched,
            Some(m) => {
                let is_dropped = rated
                    .iter()
                    .position(|r| std::ptr::eq(*r, m))
                    .is_none_or(|r| dropped[r]);
                if is_dropped {
                    Target::Unlimited
                } else {
                    check_rate_only(machine, tenant, m)?;
                    let d = &request.descriptors[i];
                    if d.negative {
                        Target::Return(add_part(&mut plan.returns, m, d.hits))
                    } else {
                        Target::Part(add_part(&mut plan.parts, m, d.hits))
                    }
                }
            }
        };
        plan.targets.push(target);
    }
    Ok(plan)
}

impl Plan {
    /// Descriptor `i`'s target on the limit of its override `(requests, unit_s)`, keyed by
    /// its entries; notes the limit to make when this node has none.
    fn add_override(
        &mut self,
        machine: &Machine,
        i: usize,
        d: &Descriptor,
        (requests, unit_s): (u32, u64),
    ) -> Result<Target, String> {
        let per_second = requests as f64 / unit_s as f64;
        LimitSpec::new(0, per_second, Some(requests as u64)).map_err(|why| {
            format!("descriptors[{i}].limit asks {requests} per {unit_s} s: {why}")
        })?;
        let name = override_name(requests, unit_s);
        if !machine.has_limit(&self.tenant, &name) && !self.overrides.contains(&(requests, unit_s))
        {
            self.overrides.push((requests, unit_s));
        }
        let entries: Vec<(&str, &str)> = d
            .entries
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let key = override_key(&entries).unwrap_or_else(|| digest_key(&entries));
        let m = Matched {
            name,
            key: Some(key),
            path: Vec::new(),
        };
        Ok(if d.negative {
            Target::Return(add_part(&mut self.returns, &m, d.hits))
        } else {
            Target::Part(add_part(&mut self.parts, &m, d.hits))
        })
    }
}

/// The key of a descriptor whose entries are too long for [`override_key`]: `sha256:` and
/// the hex digest of each entry's key and value, each preceded by its length.
fn digest_key(entries: &[(&str, &str)]) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for (key, value) in entries {
        for text in [key, value] {
            hash.update((text.len() as u64).to_le_bytes());
            hash.update(text.as_bytes());
        }
    }
    let hex: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// Adds a descriptor's hits on `m` to `parts` (the take's or the return's), as a new part
/// or summed into the part of the same limit and key; returns its index. Two keys of one
/// keyed limit are two parts of the one take.
fn add_part(parts: &mut Vec<Part>, m: &Matched<'_>, hits: u32) -> usize {
    let same = parts
        .iter()
        .position(|p| p.limit == m.name && p.key == m.key);
    match same {
        Some(n) => {
            let part = &mut parts[n];
            part.units = part.units.saturating_add(hits);
            n
        }
        None => {
            parts.push(Part {
                limit: m.name.clone(),
                key: m.key.clone(),
                units: hits,
            });
            parts.len() - 1
        }
    }
}

/// Whether the limit `m` reached takes tokens (a node with a rate); a limit without one
/// (an `unlimited` or inner node), or one whose keying does not fit the path, does not.
fn rates(machine: &Machine, tenant: &str, m: &Matched<'_>) -> bool {
    machine
        .bucket_now(tenant, &m.name, m.key.as_deref())
        .is_some_and(|b| b.spec.rates())
}

/// Whether a descriptor's `limit` override `(requests, unit seconds)` names the rate of
/// the limit it matched: then it is decided on that limit (ratelimit's counter of the same
/// descriptor and window); another rate is decided on the override's own limit.
fn same_rate(
    machine: &Machine,
    tenant: &str,
    m: Option<&Matched<'_>>,
    (requests, unit): (u32, u64),
) -> bool {
    let bucket = m.and_then(|m| machine.bucket_now(tenant, &m.name, m.key.as_deref()));
    bucket.as_ref().is_some_and(|b| {
        b.spec.rates()
            && b.spec.burst == requests as u64
            && (b.spec.per_second * unit as f64 - requests as f64).abs() <= requests as f64 * 1e-9
    })
}

/// A take holds nothing, so a limit with a concurrency cap cannot be decided here.
fn check_rate_only(machine: &Machine, tenant: &str, m: &Matched<'_>) -> Result<(), String> {
    match machine.bucket_now(tenant, &m.name, m.key.as_deref()) {
        Some(b) if b.spec.concurrent > 0 => Err(format!(
            "limit {tenant}/{} has a concurrent cap: Envoy's descriptors take tokens from \
             rate-only limits",
            m.name
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::machine::{Batch, Definition, Leadership};
    use weir_core::rls::path::{Segment, limit_name, replaces_name};

    /// What `weir limits apply` compiles this ratelimit file to (tenant `d`), in its order:
    ///
    /// ```yaml
    /// domain: d
    /// descriptors:
    ///   - key: ip
    ///     rate_limit: {unit: second, requests_per_unit: 10}
    ///   - key: inner
    ///     value: x
    ///     descriptors:
    ///       - key: user
    ///         rate_limit: {unit: minute, requests_per_unit: 5, name: users}
    ///   - key: vip
    ///     rate_limit: {unit: minute, requests_per_unit: 50, replaces: [{name: users}]}
    /// ```
    fn definitions() -> Vec<Definition> {
        let segment = |key, value| Segment::of_node(key, value);
        let ip = [segment("ip", None)];
        let inner = [segment("inner", Some("x"))];
        let user = [segment("inner", Some("x")), segment("user", None)];
        let vip = [segment("vip", None)];
        let limit = |name: String, per_second: f64, burst: Option<u64>, keyed: bool| Definition {
            tenant: "d".into(),
            name,
            concurrent: 0,
            per_second,
            burst,
            keyed,
            keys_max: None,
            shadow: false,
        };
        vec![
            limit(limit_name(&ip), 10.0, Some(10), true),
            limit(limit_name(&inner), 0.0, None, false),
            limit(limit_name(&user), 5.0 / 60.0, Some(5), true),
            limit(limit_name(&vip), 50.0 / 60.0, Some(50), true),
            limit(replaces_name(&vip, &user), 0.0, None, false),
        ]
    }

    fn machine() -> Machine {
        let mut machine = Machine::new();
        let commands = definitions()
            .into_iter()
            .map(|d| d.into_command())
            .collect();
        let batch = Batch {
            leadership: Leadership::default(),
            clock_ms: 0,
            wall_ms: 0,
            commands,
        };
        let applied = machine.apply(1, &batch);
        assert!(
            applied
                .replies
                .iter()
                .all(|r| *r == weir_core::machine::Reply::Done)
        );
        machine
    }

    fn checked(descriptors: &[(&[(&str, &str)], u32)]) -> Checked {
        Checked {
            tenant: "d".into(),
            descriptors: descriptors
                .iter()
                .map(|(entries, hits)| Descriptor {
                    entries: entries
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                    hits: *hits,
                    limit: None,
                    negative: false,
                })
                .collect(),
        }
    }

    fn part(limit: &str, key: &str, units: u32) -> Part {
        Part {
            limit: limit.into(),
            key: Some(key.into()),
            units,
        }
    }

    #[test]
    fn one_part_per_limit_and_key_hits_summed_and_unmatched_or_inner_nodes_uncharged() {
        let m = machine();
        let p = plan(
            &m,
            &checked(&[
                (&[("ip", "1.2.3.4")], 1),
                (&[("nothing", "here")], 1),
                (&[("ip", "1.2.3.4")], 2),
                (&[("inner", "x")], 1),
            ]),
        )
        .unwrap();
        assert_eq!(
            p.targets,
            [
                Target::Part(0),
                Target::Unmatched,
                Target::Part(0),
                Target::Unlimited
            ]
        );
        assert_eq!(p.parts, [part("envoy:ip", "1.2.3.4", 3)]);
    }

    #[test]
    fn a_replaced_match_is_uncharged_and_two_keys_of_one_limit_are_two_parts() {
        let m = machine();
        let p = plan(
            &m,
            &checked(&[(&[("inner", "x"), ("user", "u")], 1), (&[("vip", "v")], 1)]),
        )
        .unwrap();
        assert_eq!(p.targets, [Target::Unlimited, Target::Part(0)]);
        assert_eq!(p.parts, [part("envoy:vip", "v", 1)]);
        let p = plan(
            &m,
            &checked(&[
                (&[("ip", "a")], 1),
                (&[("ip", "b")], 2),
                (&[("ip", "a")], 1),
            ]),
        )
        .unwrap();
        assert_eq!(
            p.targets,
            [Target::Part(0), Target::Part(1), Target::Part(0)]
        );
        assert_eq!(
            p.parts,
            [part("envoy:ip", "a", 2), part("envoy:ip", "b", 2)]
        );
    }

    #[test]
    fn an_override_of_another_rate_is_a_part_of_its_own_limit_keyed_by_the_descriptor() {
        let m = machine();
        let mut request = checked(&[
            (&[("ip", "1.2.3.4")], 1),
            (&[("ip", "1.2.3.4")], 1),
            (&[("nothing", "here")], 2),
        ]);
        // The rule's own rate: decided on the rule. Another: on the override's limit.
        request.descriptors[0].limit = Some((10, 1));
        request.descriptors[1].limit = Some((3, 60));
        request.descriptors[2].limit = Some((3, 60));
        let p = plan(&m, &request).unwrap();
        assert_eq!(
            p.targets,
            [Target::Part(0), Target::Part(1), Target::Part(2)]
        );
        assert_eq!(
            p.parts,
            [
                part("envoy:ip", "1.2.3.4", 1),
                part("envoy^3-per-60s", "ip=1.2.3.4", 1),
                part("envoy^3-per-60s", "nothing=here", 2),
            ]
        );
        assert_eq!(p.overrides, [(3, 60)]);
        // Entries too long for a key are keyed by their digest.
        let long = "v".repeat(100);
        let mut request = checked(&[(&[("a", &long), ("b", &long)], 1)]);
        request.descriptors[0].limit = Some((3, 60));
        let p = plan(&m, &request).unwrap();
        let key = p.parts[0].key.as_deref().unwrap();
        assert!(key.starts_with("sha256:") && key.len() == 71, "{key}");
        // A rate no bucket can keep is refused, naming the field.
        request.descriptors[0].limit = Some((1, 365 * 86_400));
        let e = plan(&m, &request).unwrap_err();
        assert!(
            e.starts_with("descriptors[0].limit asks 1 per 31536000 s"),
            "{e}"
        );
    }
}
