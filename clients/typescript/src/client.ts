/**
 * The client: every operation of the cluster's HTTP/JSON API (docs/openapi.yaml), and
 * sessions. It owns the transport and the sessions it opened; `close()` ends both.
 * Options are camelCase; answers keep the server's JSON names (`types.ts`).
 */

import { asyncDispose } from "./dispose.js";
import { type ClientOptions, resolve } from "./config.js";
import { Busy, ProtocolError, Refused, namePart } from "./errors.js";
import { REQUEST_DEADLINE_MS, Transport, sleep } from "./transport.js";
import { type AcquireOptions, Session, haltFromJson, q } from "./session.js";
import {
  type Halt,
  type LimitSpec,
  type LimitStatus,
  type LimitsChange,
  type Part,
  type Run,
  type Settlement,
  type Spent,
  type TenantStatus,
  partJson,
  specJson,
} from "./types.js";

/** Leave a tenant ceiling as it is (`setTenant`); null clears it. */
export const KEEP: unique symbol = Symbol("weir.KEEP");

/** A session's options. */
export interface SessionOptions {
  /** Its TTL (ms, default 3000; at least 3000 rides out a stalled leader, G9). */
  ttlMs?: number;
  /** The default tenant of its acquires. */
  tenant?: string;
}

/** A limit definition, and where. */
export interface DefineOptions extends LimitSpec {
  tenant?: string;
}

/** A one-shot take. */
export interface TakeOptions {
  units?: number;
  key?: string;
  /** More rate limits of the tenant, taken from all or none. */
  parts?: readonly Part[];
  agent?: string;
  tenant?: string;
  /** Sleep for the Busy refusal's retry-after and try again while within this (ms). */
  waitMs?: number;
}

/** A run's admission. */
export interface ReserveOptions {
  agent?: string;
  period?: string;
  holdTokens?: number;
  holdMinor?: number;
  tenant?: string;
}

/** One pass's settlement. */
export interface SettleOptions {
  epoch: number;
  period?: string;
  tokens?: number;
  minorUnits?: number;
  releaseSlot?: boolean;
  tenant?: string;
}

function record(answer: unknown, what: string): Record<string, unknown> {
  if (answer === null || typeof answer !== "object" || Array.isArray(answer)) {
    throw new ProtocolError(`${what} answered ${JSON.stringify(answer)}`);
  }
  return answer as Record<string, unknown>;
}

function list(answer: unknown, key: string, what: string): unknown[] {
  const items = record(answer, what)[key];
  if (!Array.isArray(items)) throw new ProtocolError(`${what} answered ${JSON.stringify(answer)}`);
  return items;
}

/**
 * A client of a Weir cluster over its HTTP/JSON API. `servers` (any node is an entry
 * point), `ca`, `token` and `tenant` default from the environment (`config.ts`).
 */
export class Client {
  readonly tenant: string;
  private readonly transport: Transport;
  private readonly sessions = new Set<Session>();

  constructor(options: ClientOptions = {}) {
    const deadline = options.requestDeadlineMs ?? REQUEST_DEADLINE_MS;
    if (!(deadline > 0 && deadline <= REQUEST_DEADLINE_MS)) {
      throw new RangeError(`requestDeadlineMs must be in (0, ${REQUEST_DEADLINE_MS}]`);
    }
    const settings = resolve(options);
    this.tenant = settings.tenant;
    this.transport = new Transport(settings, deadline, options.log);
  }

  /** The nodes' base URLs. */
  get servers(): string[] {
    return this.transport.nodes.map((n) => n.url);
  }

  /** The node requests go to now. */
  get currentServer(): string {
    return this.transport.current.url;
  }

  private t(tenant: string | undefined): string {
    return q(tenant ?? this.tenant);
  }

  /** Closes every session still open (each bounded to a few seconds) and the
   * connections. */
  async close(): Promise<void> {
    await Promise.allSettled([...this.sessions].map((s) => Promise.race([s.close(), sleep(5000)])));
    this.transport.close();
  }

  async [asyncDispose](): Promise<void> {
    await this.close();
  }

  // -- sessions ----------------------------------------------------------------------------

  /** Opens a session kept alive every TTL/5 until closed (`close()` or `await using`). */
  async session(options: SessionOptions = {}): Promise<Session> {
    const session = await Session.open(this.transport, options.ttlMs ?? 3000, options.tenant ?? this.tenant, (s) =>
      this.sessions.delete(s),
    );
    this.sessions.add(session);
    return session;
  }

  /** Opens a session, holds a permit of `limit` while `work` runs (its signal aborts when
   * the permit may be lost), then releases it and closes the session. */
  async withPermit<T>(
    limit: string,
    work: (signal: AbortSignal) => Promise<T>,
    options: AcquireOptions & { ttlMs?: number } = {},
  ): Promise<T> {
    const session = await this.session({ ttlMs: options.ttlMs ?? 3000, ...(options.tenant ? { tenant: options.tenant } : {}) });
    try {
      return await session.withPermit(limit, (signal) => work(signal), options);
    } finally {
      await session[asyncDispose]();
    }
  }

  // -- limits ------------------------------------------------------------------------------

  /** Defines limit `name` or changes its spec. */
  async defineLimit(name: string, options: DefineOptions = {}): Promise<void> {
    await this.transport.call("PUT", `/v1/tenants/${this.t(options.tenant)}/limits/${q(name)}`, specJson(options));
  }

  /** Sets the tenant's limits in one entry, all or nothing; `prune` removes the others. */
  async applyLimits(
    limits: Readonly<Record<string, LimitSpec>>,
    options: { prune?: boolean; dryRun?: boolean; tenant?: string } = {},
  ): Promise<LimitsChange> {
    const body = {
      limits: Object.fromEntries(Object.entries(limits).map(([n, s]) => [n, specJson(s)])),
      prune: options.prune ?? false,
      dry_run: options.dryRun ?? false,
    };
    return record(await this.transport.call("PUT", `/v1/tenants/${this.t(options.tenant)}/limits`, body), "limits apply") as unknown as LimitsChange;
  }

  /** On a cluster of several Raft groups: places the tenant in data group `group` once and
   * for good (admin), or with no group finds where it lives and places it in the default
   * group if nowhere; answers the group it lives in. Another group than the one it has
   * throws WrongGroup naming that one. A cluster of one group answers 0 for every tenant. */
  async placeTenant(group?: number, options: { tenant?: string } = {}): Promise<number> {
    const answer = await this.transport.call("PUT", `/v1/tenants/${this.t(options.tenant)}/placement`, {
      group: group ?? null,
    });
    return Number(record(answer, "tenant placement")["group"]);
  }

  /** A limit's spec and use (throws UnknownLimit). */
  async showLimit(name: string, options: { tenant?: string } = {}): Promise<LimitStatus> {
    const answer = await this.transport.call("GET", `/v1/tenants/${this.t(options.tenant)}/limits/${q(name)}`);
    return record(answer, "limit show") as unknown as LimitStatus;
  }

  /** One key's state of a keyed limit, in a limit's shape (a key not live answers a fresh
   * key's state). */
  async showKey(name: string, key: string, options: { tenant?: string } = {}): Promise<LimitStatus> {
    const answer = await this.transport.call("GET", `/v1/tenants/${this.t(options.tenant)}/limits/${q(name)}/keys/${q(key)}`);
    return record(answer, "key show") as unknown as LimitStatus;
  }

  /** Every limit of the tenant whose name starts with `prefix`, by name, page by page. */
  async listLimits(options: { prefix?: string; tenant?: string } = {}): Promise<LimitStatus[]> {
    const out: LimitStatus[] = [];
    const path = `/v1/tenants/${this.t(options.tenant)}/limits?prefix=${q(options.prefix ?? "")}`;
    let after: unknown = null;
    for (;;) {
      const page = after === null ? path : `${path}&after=${q(String(after))}`;
      const answer = await this.transport.call("GET", page);
      out.push(...(list(answer, "limits", "limit list") as LimitStatus[]));
      after = record(answer, "limit list")["next"] ?? null;
      if (after === null) return out;
      if (typeof after !== "string") throw new ProtocolError(`limit list answered next ${JSON.stringify(after)}`);
    }
  }

  /** Removes a limit; its waiters are refused with LimitRemoved. */
  async removeLimit(name: string, options: { tenant?: string } = {}): Promise<void> {
    await this.transport.call("DELETE", `/v1/tenants/${this.t(options.tenant)}/limits/${q(name)}`);
  }

  /** Whether a permit with `fence` is held on the limit now (linearizable). */
  async fenceHeld(name: string, fence: number, options: { tenant?: string } = {}): Promise<boolean> {
    const answer = await this.transport.call("GET", `/v1/tenants/${this.t(options.tenant)}/limits/${q(name)}/fences/${fence}`);
    return record(answer, "fence check")["held"] === true;
  }

  // -- takes -------------------------------------------------------------------------------

  /**
   * Takes units from a rate-only limit now, or not at all: answers the tokens left (null
   * for a key or several parts), or throws Busy (`retryAfterMs`). With `waitMs`, sleeps
   * for the retry-after and tries again while that stays within `waitMs`.
   */
  async take(name: string, options: TakeOptions = {}): Promise<number | null> {
    const units = options.units ?? 1;
    const body: Record<string, unknown> = { units };
    if (options.key !== undefined) body["key"] = options.key;
    if (options.parts && options.parts.length > 0) body["parts"] = options.parts.map(partJson);
    if (options.agent !== undefined) body["agent"] = options.agent;
    const asked: Part[] = [{ limit: name, units, ...(options.key !== undefined ? { key: options.key } : {}) }, ...(options.parts ?? [])];
    const path = `/v1/tenants/${this.t(options.tenant)}/limits/${q(name)}/take`;
    const started = performance.now();
    for (;;) {
      let answer: unknown;
      try {
        answer = await this.transport.call("POST", path, body);
      } catch (e) {
        if (!(e instanceof Refused)) throw e;
        namePart(e, asked);
        if (!(e instanceof Busy)) throw e;
        const after = e.retryAfterMs;
        if (options.waitMs === undefined || after === null) throw e;
        if (performance.now() - started + after > options.waitMs) throw e;
        await sleep(after);
        continue;
      }
      const remaining = record(answer, "take")["remaining"];
      return typeof remaining === "number" ? remaining : null;
    }
  }

  // -- tenants -----------------------------------------------------------------------------

  /** Sets a tenant's ceilings: KEEP (the default) keeps one, a number sets, null clears. */
  async setTenant(
    options: {
      maxRunning?: number | null | typeof KEEP;
      budgetTokens?: number | null | typeof KEEP;
      budgetMinor?: number | null | typeof KEEP;
      tenant?: string;
    } = {},
  ): Promise<TenantStatus> {
    const body: Record<string, unknown> = {};
    for (const [key, value] of [
      ["max_running", options.maxRunning],
      ["budget_tokens", options.budgetTokens],
      ["budget_minor", options.budgetMinor],
    ] as const) {
      if (value !== undefined && value !== KEEP) body[key] = value;
    }
    return record(await this.transport.call("PUT", `/v1/tenants/${this.t(options.tenant)}`, body), "tenant set");
  }

  /** A tenant's ceilings, budgets, running count and halts. */
  async showTenant(options: { tenant?: string } = {}): Promise<TenantStatus> {
    return record(await this.transport.call("GET", `/v1/tenants/${this.t(options.tenant)}`), "tenant show");
  }

  // -- runs and spend ----------------------------------------------------------------------

  /** Admits `run` to a slot of the tenant's running set (idempotent per run), or throws
   * TooManyRuns, BudgetExhausted or Halted. */
  async reserve(run: string, options: ReserveOptions = {}): Promise<void> {
    const body: Record<string, unknown> = {};
    if (options.agent !== undefined) body["agent"] = options.agent;
    if (options.period !== undefined) body["period"] = options.period;
    if (options.holdTokens !== undefined) body["hold_tokens"] = options.holdTokens;
    if (options.holdMinor !== undefined) body["hold_minor"] = options.holdMinor;
    await this.transport.call("POST", `/v1/tenants/${this.t(options.tenant)}/runs/${q(run)}/reserve`, body);
  }

  /** Frees the run's slot (idempotent). */
  async releaseRun(run: string, options: { tenant?: string } = {}): Promise<void> {
    await this.transport.call("POST", `/v1/tenants/${this.t(options.tenant)}/runs/${q(run)}/release`);
  }

  /** Charges one pass of `run` to the period, once per (run, epoch): a retry answers
   * `duplicate`; the same key with another payload throws Conflict. */
  async settle(run: string, options: SettleOptions): Promise<Settlement> {
    const body: Record<string, unknown> = {
      epoch: options.epoch,
      tokens: options.tokens ?? 0,
      minor_units: options.minorUnits ?? 0,
      release_slot: options.releaseSlot ?? false,
    };
    if (options.period !== undefined) body["period"] = options.period;
    const answer = await this.transport.call("POST", `/v1/tenants/${this.t(options.tenant)}/runs/${q(run)}/settle`, body);
    return record(answer, "settle") as unknown as Settlement;
  }

  /** The running set, with admission times. */
  async listRuns(options: { tenant?: string } = {}): Promise<Run[]> {
    return list(await this.transport.call("GET", `/v1/tenants/${this.t(options.tenant)}/runs`), "runs", "run list") as Run[];
  }

  /** Spend charged to `period`. */
  async spent(period: string, options: { tenant?: string } = {}): Promise<Spent> {
    return record(await this.transport.call("GET", `/v1/tenants/${this.t(options.tenant)}/spent/${q(period)}`), "spent") as unknown as Spent;
  }

  // -- halts -------------------------------------------------------------------------------

  private haltPath(agent: string | undefined, tenant: string | undefined): string {
    return agent === undefined
      ? `/v1/tenants/${this.t(tenant)}/halt`
      : `/v1/tenants/${this.t(tenant)}/agents/${q(agent)}/halt`;
  }

  /** Halts the tenant, or one agent of it: its reserves and acquires are refused, its
   * queued tickets refused, and its permit holders told (their `lost` resolves). */
  async setHalt(reason: string, options: { agent?: string; tenant?: string } = {}): Promise<void> {
    await this.transport.call("PUT", this.haltPath(options.agent, options.tenant), { reason });
  }

  /** Clears the tenant's halt, or one agent's. */
  async clearHalt(options: { agent?: string; tenant?: string } = {}): Promise<void> {
    await this.transport.call("DELETE", this.haltPath(options.agent, options.tenant));
  }

  /** The tenant's halts, tenant-wide first. */
  async listHalts(options: { tenant?: string } = {}): Promise<Halt[]> {
    return list(await this.transport.call("GET", `/v1/tenants/${this.t(options.tenant)}/halts`), "halts", "halt list").map(haltFromJson);
  }

  // -- the cluster -------------------------------------------------------------------------

  /** Every member's status as the node asked sees it (admin where tokens are on). */
  async status(): Promise<Record<string, unknown>> {
    return record(await this.transport.call("GET", "/v1/status"), "status");
  }
}
