//! The README's third example: a several-part request.

use std::time::Duration;

use weir_client::{AcquireError, AcquireOptions, Client, Session};
use weir_core::machine::{Part, Refusal, Reply};

pub async fn several_parts(servers: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::new(servers);
    client.define_limit("examples", "db", 3, 0.0, None).await?;
    client
        .define_limit("examples", "model-tokens", 0, 100.0, Some(1_000))
        .await?;
    let session = Session::open(&client, Duration::from_secs(3)).await?;
    let tokens = |units| Part {
        limit: "model-tokens".into(),
        key: None,
        units,
    };
    // A database slot and an estimate of 150 model tokens: under one fence, or neither.
    let call = session
        .acquire(AcquireOptions {
            parts: vec![tokens(150)],
            estimate: true,
            timeout: Some(Duration::from_secs(10)),
            ..AcquireOptions::new("examples", "db")
        })
        .await?;
    println!("db slot and 150 tokens under fence {}", call.fence());
    match call.settle(120).await? {
        Reply::Settled { .. } => println!("settled: 30 tokens back to the bucket"),
        other => return Err(format!("not settled: {other:?}").into()),
    }
    call.release().await?;
    let too_many = AcquireOptions {
        parts: vec![tokens(5_000)],
        ..AcquireOptions::new("examples", "db")
    };
    match session.acquire(too_many).await {
        // Nothing is charged on db either.
        Err(AcquireError::Refused(refused @ Refusal::TooLarge { .. })) => println!("{refused}"),
        Err(e) => return Err(e.into()),
        Ok(_) => return Err("granted more than the bucket holds".into()),
    }
    session.close().await?;
    Ok(())
}
