//! [`setup`]: defines the run's limits before the workloads start: the table of
//! `setup.rs` (the leased rate limits and the Envoy holders' among them), the keyed ones of `keyed.rs`, and the
//! halt tenant's.

use weir_client::Client;

use super::keyed;
use crate::setup::{
    HALT_LIMIT, HALT_LIMIT_CAP, HALT_QUEUE, HALT_TENANT, LEASED_LIMITS, LIMITS, RLS_LIMIT, TENANT,
};

/// Defines the limits (retrying until the cluster answers): [`TENANT`]'s through `client`,
/// [`HALT_TENANT`]'s through `halty` (in a secure run each with its own tenant's token).
pub async fn setup(client: &Client, halty: &Client) -> Result<(), String> {
    for (name, concurrent, per_second, burst) in LIMITS {
        client
            .define_limit(TENANT, name, concurrent, per_second, burst)
            .await
            .map_err(|e| format!("define {name}: {e}"))?;
    }
    for (name, per_second, burst) in LEASED_LIMITS.into_iter().chain([RLS_LIMIT]) {
        client
            .define_limit(TENANT, name, 0, per_second, Some(burst))
            .await
            .map_err(|e| format!("define {name}: {e}"))?;
    }
    for definition in keyed::definitions() {
        let name = definition.name.clone();
        match client.define(definition).await {
            Ok(weir_core::machine::Reply::Refused(r)) => return Err(format!("define {name}: {r}")),
            Ok(_) => {}
            Err(e) => return Err(format!("define {name}: {e}")),
        }
    }
    halty
        .define_limit(HALT_TENANT, HALT_LIMIT, HALT_LIMIT_CAP, 0.0, None)
        .await
        .map_err(|e| format!("define {HALT_LIMIT}: {e}"))?;
    halty
        .define_limit(HALT_TENANT, HALT_QUEUE, 1, 0.0, None)
        .await
        .map_err(|e| format!("define {HALT_QUEUE}: {e}"))?;
    Ok(())
}
