//! The README's fourth example: a loss noticed.

use std::time::Duration;

use weir_client::{AcquireOptions, Client, Lost, Session};
use weir_core::machine::HaltScope;

pub async fn loss_noticed(servers: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::new(servers);
    client
        .define_limit("examples", "deploy", 1, 0.0, None)
        .await?;
    let session = Session::open(&client, Duration::from_secs(3)).await?;
    let permit = session
        .acquire(AcquireOptions {
            agent: Some("release-bot".into()),
            ..AcquireOptions::new("examples", "deploy")
        })
        .await?;
    let bot = HaltScope::Agent("release-bot".into());
    let operator = client.clone();
    let halt = tokio::spawn(async move {
        // An operator halts the agent while the work runs.
        tokio::time::sleep(Duration::from_millis(200)).await;
        operator.set_halt("examples", bot, "bad rollout").await
    });
    let mut step = 0;
    let lost = loop {
        tokio::select! {
            lost = permit.lost() => break lost, // also: deadline passed, session expired
            () = tokio::time::sleep(Duration::from_millis(50)) => step += 1, // a step of the work
        }
        if step == 200 {
            return Err("the loss was never noticed".into());
        }
    };
    let Lost::Halted { scope, reason } = lost else {
        return Err(format!("lost: {lost}").into());
    };
    println!("stopped at step {step}: {scope} halted: {reason}");
    halt.await??;
    permit.release().await?; // a halted permit stays held until released
    let bot = HaltScope::Agent("release-bot".into());
    client.clear_halt("examples", bot).await?;
    session.close().await?;
    Ok(())
}
