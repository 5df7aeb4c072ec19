//! The README's first example: a permit held while work runs.

use std::time::Duration;

use weir_client::{AcquireOptions, Client, Session};
use weir_core::machine::{Fence, Priority};

async fn write_rows(_fence: Fence) {
    // The work; pass the fence to the database: it rejects the writes of stale holders.
    tokio::time::sleep(Duration::from_millis(200)).await;
}

pub async fn permit_held_while_work_runs(
    servers: Vec<String>,
) -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::new(servers);
    client.define_limit("examples", "db", 3, 0.0, None).await?;
    let session = Session::open(&client, Duration::from_secs(3)).await?; // kept alive every TTL/5
    let permit = session
        .acquire(AcquireOptions {
            priority: Priority {
                level: 1,
                ..Priority::default()
            },
            timeout: Some(Duration::from_secs(10)),
            ..AcquireOptions::new("examples", "db")
        })
        .await?;
    tokio::select! {
        () = write_rows(permit.fence()) => println!("done under fence {}", permit.fence()),
        // The belief ended (deadline passed, halted, expired): stop the work.
        lost = permit.lost() => return Err(format!("stopped: {lost}").into()),
    }
    permit.release().await?; // or drop it: released in the background
    session.close().await?;
    Ok(())
}
