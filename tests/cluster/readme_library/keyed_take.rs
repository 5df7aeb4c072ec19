//! The README's second example: a keyed take.

use std::time::Duration;

use weir_client::{AcquireError, AcquireOptions, Client, Session};
use weir_core::machine::{Definition, Refusal};

pub async fn keyed_take(servers: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::new(servers);
    let per_user = Definition {
        per_second: 10.0 / 60.0, // ten a minute, in bursts of two, for each user
        burst: Some(2),
        keyed: true,
        ..Definition::from_legacy("examples", "per-user", 0, 0.0, None)
    };
    client.define(per_user).await?;
    // A take is an acquire that does not wait; on a rate-only limit it holds nothing, so
    // its grant is consumed rather than released.
    let session = Session::open(&client, Duration::from_secs(3)).await?;
    let take = |user: &str| AcquireOptions {
        key: Some(user.into()),
        wait: false,
        ..AcquireOptions::new("examples", "per-user")
    };
    for _ in 0..3 {
        match session.acquire(take("alice")).await {
            Ok(grant) => {
                grant.consume();
                println!("alice: served");
            }
            Err(AcquireError::Refused(Refusal::Busy { .. })) => println!("alice: busy"),
            Err(e) => return Err(e.into()),
        }
    }
    session.acquire(take("bob")).await?.consume();
    println!("bob: served (his own bucket)");
    session.close().await?;
    Ok(())
}
