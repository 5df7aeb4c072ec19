//! Typed shorthands for the writes and reads that are not sessions or permits.
//! Each is one request through [`Client::write`] or [`Client::read`]; refusals come back as
//! `Ok(Reply::Refused(..))` (writes) — typed values, never text.

use super::client::Client;
use super::error::ClientError;
use weir_core::machine::{
    Change, Command, Definition, Fence, HaltScope, KeyPage, LimitStatus, LimitsChange, LimitsPage,
    Refusal, Reply, RunSlot, Settle, Spend,
};
use weir_proto::protocol::{Answer, Query};

fn unexpected(answer: Answer) -> ClientError {
    ClientError::Protocol(format!("unexpected answer {answer:?}"))
}

impl Client {
    /// Defines `tenant/name`, or changes its spec (holders keep their permits): `concurrent`
    /// units at once (0: no cap), `per_second` refill (0: no rate), `burst` tokens.
    pub async fn define_limit(
        &self,
        tenant: &str,
        name: &str,
        concurrent: u32,
        per_second: f64,
        burst: Option<u64>,
    ) -> Result<Reply, ClientError> {
        self.write(Command::DefineLimit {
            tenant: tenant.into(),
            name: name.into(),
            concurrent,
            per_second,
            burst,
        })
        .await
    }

    /// Defines a limit with every setting of [`Definition`]: keyed (one bucket or semaphore
    /// per key, at most `keys_max` live keys) and shadow mode besides the spec.
    pub async fn define(&self, definition: Definition) -> Result<Reply, ClientError> {
        self.write(Command::Define(definition)).await
    }

    /// Sets, keeps or clears each of a tenant's ceilings.
    pub async fn set_tenant(
        &self,
        tenant: &str,
        max_running: Change<u32>,
        budget_tokens: Change<u64>,
        budget_minor: Change<u64>,
    ) -> Result<Reply, ClientError> {
        self.write(Command::SetTenant {
            tenant: tenant.into(),
            max_running,
            budget_tokens,
            budget_minor,
        })
        .await
    }

    /// `Admitted`, or a refusal (`TooManyRuns`, `BudgetExhausted`, `Halted`). No hold: the
    /// reserve is refused once the period's spend has reached a budget.
    pub async fn reserve(
        &self,
        tenant: &str,
        run: &str,
        agent: Option<&str>,
        period: Option<&str>,
    ) -> Result<Reply, ClientError> {
        self.reserve_holding(tenant, run, agent, period, None, None)
            .await
    }

    /// A reserve that holds budget (G6): admitted only while settled + standing holds + this
    /// hold fit the period's budget. The run's settlements use the hold up (a charge above
    /// it answers `Overrun`); releasing the slot frees what is left. A kind left `None` is
    /// held at 0; with both `None` this is [`Client::reserve`].
    pub async fn reserve_holding(
        &self,
        tenant: &str,
        run: &str,
        agent: Option<&str>,
        period: Option<&str>,
        hold_tokens: Option<u64>,
        hold_minor: Option<u64>,
    ) -> Result<Reply, ClientError> {
        self.write(Command::Reserve {
            tenant: tenant.into(),
            run: run.into(),
            agent: agent.map(Into::into),
            period: period.map(Into::into),
            hold_tokens,
            hold_minor,
        })
        .await
    }

    /// Frees a run's slot. Idempotent.
    pub async fn release_run(&self, tenant: &str, run: &str) -> Result<Reply, ClientError> {
        self.write(Command::ReleaseRun {
            tenant: tenant.into(),
            run: run.into(),
        })
        .await
    }

    /// `Settled {duplicate}`, `Overrun` (charged, above the run's hold), or `Conflict`.
    pub async fn settle(&self, settle: Settle) -> Result<Reply, ClientError> {
        self.write(Command::Settle(settle)).await
    }

    /// Halts `scope` of a tenant: waiters are refused, holders are told.
    pub async fn set_halt(
        &self,
        tenant: &str,
        scope: HaltScope,
        reason: &str,
    ) -> Result<Reply, ClientError> {
        self.write(Command::SetHalt {
            tenant: tenant.into(),
            scope,
            reason: reason.into(),
        })
        .await
    }

    /// Clears a halt on `scope` of a tenant.
    pub async fn clear_halt(&self, tenant: &str, scope: HaltScope) -> Result<Reply, ClientError> {
        self.write(Command::ClearHalt {
            tenant: tenant.into(),
            scope,
        })
        .await
    }

    /// What a tenant spent in `period`.
    pub async fn spent(&self, tenant: &str, period: &str) -> Result<Spend, ClientError> {
        match self
            .read(Query::Spent {
                tenant: tenant.into(),
                period: period.into(),
            })
            .await?
        {
            Answer::Spent(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }

    /// A tenant's running set: each run and its slot.
    pub async fn running(&self, tenant: &str) -> Result<Vec<(String, RunSlot)>, ClientError> {
        match self
            .read(Query::Running {
                tenant: tenant.into(),
            })
            .await?
        {
            Answer::Running(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }

    /// The halts on a tenant, with their reasons.
    pub async fn halts(&self, tenant: &str) -> Result<Vec<(HaltScope, String)>, ClientError> {
        match self
            .read(Query::Halts {
                tenant: tenant.into(),
            })
            .await?
        {
            Answer::Halts(h) => Ok(h),
            other => Err(unexpected(other)),
        }
    }

    /// The state of `tenant/name`, if it is defined.
    pub async fn limit_status(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Option<LimitStatus>, ClientError> {
        match self
            .read(Query::Limit {
                tenant: tenant.into(),
                name: name.into(),
            })
            .await?
        {
            Answer::Limit(l) => Ok(l),
            other => Err(unexpected(other)),
        }
    }

    /// One page of a tenant's limits, by name: names starting with `prefix`, strictly after
    /// `after`, at most `max` (at most `bounds::LIMITS_PAGE_MAX`). Each page is its own
    /// linearizable read.
    pub async fn limits_page(
        &self,
        tenant: &str,
        prefix: &str,
        after: Option<&str>,
        max: u32,
    ) -> Result<LimitsPage, ClientError> {
        match self
            .read(Query::Limits {
                tenant: tenant.into(),
                prefix: prefix.into(),
                after: after.map(str::to_owned),
                max,
            })
            .await?
        {
            Answer::Limits(page) => Ok(page),
            other => Err(unexpected(other)),
        }
    }

    /// The state of key `key` of keyed limit `tenant/name` (linearizable): a fresh key's
    /// (a full bucket, an idle semaphore) when the key is not live; `None` when there is no
    /// keyed limit of that name.
    pub async fn key_status(
        &self,
        tenant: &str,
        name: &str,
        key: &str,
    ) -> Result<Option<LimitStatus>, ClientError> {
        let query = Query::Key {
            tenant: tenant.into(),
            name: name.into(),
            key: key.into(),
        };
        match self.read(query).await? {
            Answer::Key(k) => Ok(k),
            other => Err(unexpected(other)),
        }
    }

    /// Every limit of a tenant, by name, read page by page (each page linearizable; a limit
    /// defined or removed between pages may or may not appear). Every page starts strictly
    /// after the last name of the one before, so the loop ends.
    pub async fn limits(&self, tenant: &str) -> Result<Vec<LimitStatus>, ClientError> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let max = weir_core::bounds::LIMITS_PAGE_MAX as u32;
            let page = self.limits_page(tenant, "", after.as_deref(), max).await?;
            all.extend(page.limits);
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(all),
            }
        }
    }

    /// Sets `tenant`'s definitions in one entry (`Command::ApplyLimits`): creates, changes,
    /// and with `prune` removes the tenant's other limits; all or nothing. With `dry_run`
    /// the change is computed by a linearizable read and nothing is written. The change, or
    /// the refusal naming the definition that cannot apply.
    pub async fn apply_limits(
        &self,
        tenant: &str,
        definitions: Vec<Definition>,
        prune: bool,
        dry_run: bool,
    ) -> Result<Result<LimitsChange, Refusal>, ClientError> {
        let tenant = tenant.to_owned();
        if dry_run {
            return match self
                .read(Query::LimitsChange {
                    tenant,
                    definitions,
                    prune,
                })
                .await?
            {
                Answer::LimitsChange(change) => Ok(change),
                other => Err(unexpected(other)),
            };
        }
        let command = Command::ApplyLimits {
            tenant,
            definitions,
            prune,
        };
        match self.write(command).await? {
            Reply::LimitsApplied(change) => Ok(Ok(change)),
            Reply::Refused(refusal) => Ok(Err(refusal)),
            other => Err(ClientError::Protocol(format!("unexpected reply {other:?}"))),
        }
    }

    /// At most `limit` (up to `bounds::KEYS_PAGE_MAX`) live keys of keyed limit
    /// `tenant/name` after `after`, in key order, and the key to ask after for the next
    /// page (linearizable); `None` when there is no keyed limit of that name.
    pub async fn keys(
        &self,
        tenant: &str,
        name: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Option<KeyPage>, ClientError> {
        let query = Query::Keys {
            tenant: tenant.into(),
            name: name.into(),
            after: after.map(str::to_owned),
            limit,
        };
        match self.read(query).await? {
            Answer::Keys(page) => Ok(page),
            other => Err(unexpected(other)),
        }
    }

    /// Whether a permit with `fence` is held on the limit now (linearizable).
    pub async fn validate_fence(
        &self,
        tenant: &str,
        limit: &str,
        fence: Fence,
    ) -> Result<bool, ClientError> {
        match self
            .read(Query::ValidateFence {
                tenant: tenant.into(),
                limit: limit.into(),
                fence,
            })
            .await?
        {
            Answer::FenceHeld(h) => Ok(h),
            other => Err(unexpected(other)),
        }
    }
}
