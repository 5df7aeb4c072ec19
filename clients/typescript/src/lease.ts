/**
 * Token leases held by a session (`session.lease()`, {@link Lease}): a share of a rate
 * limit (or of one key of a keyed limit) spent locally, without a request per take. The
 * rules and why they keep the limit exact are the machine's essay, "Token leases"
 * (crates/weir-core/src/machine/mod.rs); this module is the holder's half of them.
 *
 * The local bucket. Its size is the lease's cap; it starts with the tokens the cluster
 * moved to it and refills at the lease's rate on the boot clock (`clock.ts`) from the
 * moment a reply is in hand (never from when the request was sent: the cluster lowered its
 * own refill only when it applied the entry). `tryTake` decides from it alone, and only
 * while the session's belief deadline holds (the send time of the last acknowledged
 * keep-alive plus the TTL, less the margin); past it, once the session ended, or once a
 * refusal (a halt) answered a renewal, the bucket is emptied and nothing more is spent from
 * it. The refill is counted in whole micro-tokens with the remainder carried (BigInt), so
 * rounding never grants more than the rate.
 *
 * Renewals. A loop renews the lease every keep-alive period (TTL/5), and sooner when a take
 * found the bucket short, asking for a rate of one and a half times what was taken since
 * the last renewal (at least an eighth of what the options want, at most what they want)
 * and a cap of what the options want, both at most the fair share the last reply advised
 * when the lease is above it. A decrease applies here when the request is sent (the rate at
 * once, the level down to the new cap, the excess given back in the request); an increase
 * only when the reply arrives. A request whose outcome is unknown keeps the decreases and
 * gains nothing. A session's lease requests go one at a time, each with the next of the
 * session's sequence numbers, so none is taken for a retry of another; a retry of one
 * request (same number) changes nothing on the cluster. So the holder's share is never
 * larger than the cluster counts it.
 *
 * Ending. `end()` (or `await using`) gives the lease up and returns the bucket's tokens. A
 * lease whose session ends (closed or expired) ends with it on the cluster; what it held is
 * counted as spent.
 *
 * It must never: spend past the session's belief deadline or after its end, raise its
 * share before the cluster's answer, or count a reply's tokens twice.
 */

import { asyncDispose } from "./dispose.js";
import { KEEPALIVES_PER_TTL, bootNowMs } from "./clock.js";
import { Busy, ProtocolError, Refused, SessionLost, WeirError } from "./errors.js";
import type { Session } from "./session.js";
import { REQUEST_DEADLINE_MS, sleep } from "./transport.js";
import { describeLost } from "./types.js";

/** Micro-tokens per token. */
const MICRO = 1_000_000;
const NS_PER_S = 1_000_000_000n;
/** The most tokens a lease's cap may be (the cluster's bound on a burst). */
const CAP_MAX = 1_000_000_000;

/** What a lease wants: at most `ratePerS` tokens a second and `cap` tokens at once. */
export interface LeaseOptions {
  /** The key of a keyed limit. */
  key?: string;
  /** The most refill this holder wants, tokens a second. */
  ratePerS: number;
  /** The most tokens this holder wants to hold at once (its local bucket's size). */
  cap: number;
  /** The tenant (default: the session's). */
  tenant?: string;
}

/** A lease's counts, for benches and diagnostics. */
export interface LeaseFigures {
  /** Takes decided from the local bucket. */
  local: number;
  /** Takes the local bucket could not cover. */
  short: number;
  /** Lease requests sent: the first, renewals and the end. */
  requests: number;
  /** The share now: micro-tokens a second, and tokens. */
  rateMicroPerS: number;
  cap: number;
}

/** One part of a `leased` answer. */
interface Share {
  rate: number;
  cap: number;
  tokens: number;
  fairRate: number;
  fairCap: number;
}

/** A session's lease requests: their sequence number and the one under way. */
interface Requests {
  seq: number;
  tail: Promise<unknown>;
}

const requestsOf = new WeakMap<Session, Requests>();

function whole(value: unknown, what: string): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    throw new ProtocolError(`a lease answer's ${what} is ${JSON.stringify(value)}`);
  }
  return value;
}

function shareFrom(answer: unknown): Share {
  const a = (answer ?? {}) as Record<string, unknown>;
  const parts = a["parts"];
  if (a["status"] !== "leased" || !Array.isArray(parts) || parts.length !== 1) {
    throw new ProtocolError(`a lease request answered ${JSON.stringify(answer)}`);
  }
  const p = (parts[0] ?? {}) as Record<string, unknown>;
  return {
    rate: whole(p["rate_micro_per_s"], "rate_micro_per_s"),
    cap: whole(p["cap"], "cap"),
    tokens: whole(p["tokens_micro"], "tokens_micro"),
    fairRate: whole(p["fair_rate_micro_per_s"], "fair_rate_micro_per_s"),
    fairCap: whole(p["fair_cap"], "fair_cap"),
  };
}

/** The lease ended by `end()`: why a lease no longer decides locally. */
export class LeaseEnded extends WeirError {
  override name = "LeaseEnded";
}

/**
 * A token lease on one limit (or key), held by a session: takes decided locally while it
 * has tokens and the session's belief holds (module doc). Open one with
 * `session.lease(limit, options)`; end it with `end()` or `await using`.
 */
export class Lease {
  readonly tenant: string;
  readonly limit: string;
  readonly key: string | null;
  private readonly wantRate: number;
  private readonly wantCap: number;
  private rate = 0;
  private cap = 0;
  private level = 0;
  /** Refill carried below a micro-token: micro-tokens x ns / s. */
  private remainder = 0n;
  private refilledAt: number;
  private taken = 0;
  private fairRate: number;
  private fairCap: number;
  private ending = false;
  private stopped_: WeirError | null = null;
  private readonly figures_: LeaseFigures = { local: 0, short: 0, requests: 0, rateMicroPerS: 0, cap: 0 };
  /** Aborted by `end()`: stops the renewals. */
  private readonly quit = new AbortController();
  private wakeEarly: (() => void) | null = null;
  private shortSeen = false;
  private renewing: Promise<void> = Promise.resolve();

  /** @internal Use `session.lease()`. */
  constructor(
    private readonly session: Session,
    tenant: string,
    limit: string,
    options: LeaseOptions,
  ) {
    if (!(Number.isFinite(options.ratePerS) && options.ratePerS >= 0)) throw new RangeError("ratePerS must be a number of tokens a second, at least 0");
    if (!(Number.isSafeInteger(options.cap) && options.cap >= 0 && options.cap <= CAP_MAX)) {
      throw new RangeError(`cap must be a whole number of tokens in [0, ${CAP_MAX}]`);
    }
    this.tenant = tenant;
    this.limit = limit;
    this.key = options.key ?? null;
    this.wantRate = Math.floor(options.ratePerS * MICRO);
    this.wantCap = options.cap;
    this.fairRate = this.wantRate;
    this.fairCap = this.wantCap;
    this.refilledAt = bootNowMs();
  }

  /** @internal Sends the first request; a refusal throws. */
  async open(): Promise<void> {
    try {
      await this.request(this.wantRate, this.wantCap, false);
    } catch (e) {
      if (!(e instanceof Refused)) {
        // It may have been applied: end it, so that its share does not stand unused until
        // the session ends (what it may have moved here is counted as spent).
        this.ending = true;
        void this.request(0, 0, true, AbortSignal.any([this.session.stopSignal, AbortSignal.timeout(REQUEST_DEADLINE_MS)])).catch(() => undefined);
      }
      throw e;
    }
    if (this.stopped_ !== null) throw this.stopped_;
    this.renewing = this.renew().catch(() => undefined);
  }

  /**
   * Takes `units` from the local bucket if it has them and the session's belief holds: no
   * network, no wait. False means this lease cannot cover them now (ask the cluster with
   * `take()`, or wait for the refill).
   */
  tryTake(units = 1): boolean {
    if (!(Number.isSafeInteger(units) && units > 0)) throw new RangeError("units must be a whole number, at least 1");
    const now = bootNowMs();
    if (this.session.ended !== null || now >= this.session.deadlineMs) {
      // Past the belief deadline or the session's end: nothing more is spent here, and the
      // time without belief earns no refill.
      this.level = 0;
      this.remainder = 0n;
      this.refilledAt = now;
      this.figures_.short += 1;
      return false;
    }
    if (this.stopped_ !== null) {
      this.figures_.short += 1;
      return false;
    }
    this.refill(now);
    const need = units * MICRO;
    if (this.level >= need) {
      this.level -= need;
      this.taken += units;
      this.figures_.local += 1;
      return true;
    }
    this.figures_.short += 1;
    this.shortSeen = true;
    this.wakeEarly?.();
    return false;
  }

  /**
   * Takes `units`: from the local bucket when it has them, else from the cluster (one
   * take, as `client.take()`). False when neither has room now (the cluster answered Busy);
   * any other refusal (Halted, ...) throws, and so does the session's end.
   */
  async take(units = 1): Promise<boolean> {
    if (this.tryTake(units)) return true;
    const s = this.session;
    if (s.ended !== null) throw new SessionLost(`session ${s.id} ended: ${describeLost(s.ended)}`, s.ended);
    const body: Record<string, unknown> = { units };
    if (this.key !== null) body["key"] = this.key;
    try {
      await s.transport.call("POST", `/v1/tenants/${encodeURIComponent(this.tenant)}/limits/${encodeURIComponent(this.limit)}/take`, body);
      return true;
    } catch (e) {
      if (e instanceof Busy) return false;
      throw e;
    }
  }

  /** The lease's counts now. */
  get figures(): LeaseFigures {
    return { ...this.figures_ };
  }

  /** Why the lease no longer decides locally (its end, a refusal of a renewal, its
   * session's end), or null. A lease past its session's belief deadline is not ended: it
   * decides nothing until a keep-alive is acknowledged again. */
  get error(): WeirError | null {
    const s = this.session;
    if (s.ended !== null) return new SessionLost(`session ${s.id} ended: ${describeLost(s.ended)}`, s.ended);
    return this.stopped_;
  }

  /**
   * Gives the lease up: the local bucket stops at once and its tokens go back to the
   * cluster. Calling it again does nothing. Throws if the cluster did not confirm it; the
   * lease then ends with its session, and what it held is counted as spent.
   */
  async end(): Promise<void> {
    if (this.ending) return;
    this.ending = true;
    // A renewal under way is cut short: its outcome unknown, it gained nothing here.
    this.quit.abort();
    await this.renewing;
    try {
      if (this.session.ended === null) await this.request(0, 0, true);
    } finally {
      this.stop(new LeaseEnded(`lease of ${this.tenant}/${this.limit} ended`));
    }
  }

  async [asyncDispose](): Promise<void> {
    try {
      await this.end();
    } catch {
      // Not confirmed: the lease ends with its session.
    }
  }

  // -- the bucket ------------------------------------------------------------------------

  /** Brings the bucket up to `now` (exactly: whole micro-tokens, the rest carried). */
  private refill(now: number): void {
    const elapsedNs = Math.floor((now - this.refilledAt) * 1e6);
    if (elapsedNs <= 0) return;
    this.refilledAt = now;
    const full = this.cap * MICRO;
    if (this.level >= full) {
      this.level = full;
      this.remainder = 0n;
      return;
    }
    const scaled = BigInt(this.rate) * BigInt(elapsedNs) + this.remainder;
    const added = scaled / NS_PER_S;
    if (added >= BigInt(full - this.level)) {
      this.level = full;
      this.remainder = 0n;
      return;
    }
    this.level += Number(added);
    this.remainder = scaled % NS_PER_S;
  }

  /** Lowers the share to (`rate`, `cap`) where it is above them, at once; answers the
   * micro-tokens the lower cap leaves over, which the request gives back. */
  private lowerTo(rate: number, cap: number, now: number): number {
    this.refill(now);
    this.rate = Math.min(this.rate, rate);
    this.cap = Math.min(this.cap, cap);
    const kept = Math.min(this.level, this.cap * MICRO);
    const returned = this.level - kept;
    this.level = kept;
    return returned;
  }

  /** Takes the cluster's answer, arrived at `now`. */
  private adopt(share: Share, now: number): void {
    // Refilled at the old rate up to now; the new one counts from now.
    this.refill(now);
    this.rate = share.rate;
    this.cap = share.cap;
    this.level = Math.min(this.level + share.tokens, this.cap * MICRO);
    this.fairRate = share.fairRate;
    this.fairCap = share.fairCap;
    this.figures_.rateMicroPerS = this.rate;
    this.figures_.cap = this.cap;
  }

  private stop(why: WeirError): void {
    this.level = 0;
    this.rate = 0;
    this.remainder = 0n;
    if (this.stopped_ === null) this.stopped_ = why;
  }

  // -- requests --------------------------------------------------------------------------

  /**
   * One lease request asking (`rate`, `cap`), after the session's lease request under way:
   * lowers the share at once where asked lower, and takes the answer in. A refusal stops
   * the lease (a halt, a removed limit, the session's end) and is thrown; so is an error of
   * unknown outcome, which leaves the decreases made and nothing gained. Once `end()` began,
   * only its own (`final`) request is sent.
   */
  private async request(rate: number, cap: number, final: boolean, signal?: AbortSignal): Promise<void> {
    const s = this.session;
    let requests = requestsOf.get(s);
    if (requests === undefined) {
      requests = { seq: 0, tail: Promise.resolve() };
      requestsOf.set(s, requests);
    }
    const r = requests;
    const mine = r.tail.then(() => this.send(r, rate, cap, final, signal));
    r.tail = mine.catch(() => undefined);
    await mine;
  }

  private async send(r: Requests, rate: number, cap: number, final: boolean, signal?: AbortSignal): Promise<void> {
    if ((this.ending && !final) || this.stopped_ !== null || signal?.aborted) return;
    const s = this.session;
    r.seq += 1;
    this.taken = 0;
    this.figures_.requests += 1;
    const returned = this.lowerTo(rate, cap, bootNowMs());
    const part: Record<string, unknown> = { limit: this.limit, rate_micro_per_s: rate, cap, returned_micro: returned };
    if (this.key !== null) part["key"] = this.key;
    const body = { session: s.id, seq: r.seq, parts: [part] };
    let answer: unknown;
    try {
      answer = await s.hedged("POST", `/v1/tenants/${encodeURIComponent(this.tenant)}/leases`, body, signal);
    } catch (e) {
      if (e instanceof Refused) this.stop(e);
      throw e;
    }
    this.adopt(shareFrom(answer), bootNowMs());
  }

  /** Renews the lease while it and its session live: every keep-alive period, or sooner
   * when a take found the bucket short, asking for what demand and the fair share say. */
  private async renew(): Promise<void> {
    const s = this.session;
    const period = s.ttlMs / KEEPALIVES_PER_TTL;
    let last = bootNowMs();
    let wait = period;
    const stop = AbortSignal.any([this.quit.signal, s.stopSignal]);
    while (!stop.aborted) {
      let woken = this.shortSeen;
      if (!woken) {
        const early = new Promise<void>((resolve) => (this.wakeEarly = resolve));
        // Never rejects: a timer that lost the race may still be aborted later.
        const timer = sleep(wait, stop).then(
          () => false,
          () => false,
        );
        woken = await Promise.race([early.then(() => true), timer]).finally(() => (this.wakeEarly = null));
        if (stop.aborted) return;
      }
      // A short bucket renews early, but not more than every period / 8.
      if (woken) await sleep(period / 8, stop);
      this.shortSeen = false;
      if (this.stopped_ !== null || this.ending) return;
      const now = bootNowMs();
      const elapsedMs = Math.max(now - last, 1);
      const demand = Math.floor((this.taken * MICRO * 1000) / elapsedMs);
      let rate = Math.min(Math.max(demand + Math.floor(demand / 2), Math.floor(this.wantRate / 8)), this.wantRate);
      if (woken) rate = this.wantRate;
      let cap = this.wantCap;
      if (this.rate > this.fairRate) rate = Math.min(rate, this.fairRate);
      if (this.cap > this.fairCap) cap = Math.min(cap, this.fairCap);
      last = now;
      const deadline = AbortSignal.any([stop, AbortSignal.timeout(REQUEST_DEADLINE_MS)]);
      try {
        await this.request(rate, cap, false, deadline);
        wait = period;
      } catch {
        // Refused (the lease stopped), ended, or unanswered: tried again sooner.
        if (this.stopped_ !== null || stop.aborted) return;
        wait = period / 4;
      }
    }
  }
}
