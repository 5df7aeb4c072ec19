/**
 * Sessions and permits. The rules are the Python client's (`_session.py`) and the Rust
 * library's; this module owns them for this client.
 *
 * Keep-alive and the belief deadline (G2). A session sends a keep-alive every TTL/5. When
 * one is acknowledged, the session's belief deadline becomes `send time + TTL - margin`
 * (margin: a tenth of the TTL, at least 100 ms) on the boot clock (`clock.ts`). The
 * cluster cannot expire the session before `send time + TTL`, so every permit of the
 * session is believed held only until that deadline. A keep-alive with no acknowledgement
 * leaves the deadline where it was and is tried again after 100 ms. A watcher of its own
 * (not the keep-alive loop, which may be waiting on a silent node) marks every held permit
 * lost at the deadline: its `lost` promise resolves and its `signal` aborts, and the
 * permit stays lost. A keep-alive answered UnknownSession ends the session ("expired").
 *
 * Hedging. A keep-alive or an acquire unanswered for 400 ms while less than 1.6 s of the
 * belief is left is also sent to the other nodes, whether or not its node answers probes
 * (a follower whose forward waits on a dead leader heartbeats but holds requests); the
 * node that answers becomes the current one. Both are idempotent (a keep-alive by its
 * session, an acquire by its ticket). The rule lives in one place, `Session.hedged`.
 *
 * Grants, refusals, halts: the event stream. Each session follows its events (server-sent
 * events) in a loop of its own. An acquire registers its ticket as waiting before it is
 * sent, then sends it with `timeout_ms = 0`: answered `granted` it is a permit at once;
 * answered `queued`, its grant (or refusal) comes on the stream. Every time the stream
 * (re)connects, and when the node says it `lagged`, the session asks again for every
 * waiting ticket with the same request (a ticket granted meanwhile answers `granted` with
 * the same fence), and reads the halts of every tenant it holds permits of, so a lost
 * event loses nothing. A `refused` event is followed by one more ask of that ticket,
 * which answers the refusal with its fields.
 *
 * A ticket asked for again while held. A caller may ask again itself for a ticket the
 * session holds (`AcquireOptions.ticket`): the cluster answers the same grant, and the new
 * permit joins the held one (`Held.twins`), so the two are one holding: a loss of either
 * (a halt, the deadline, the session's end) is a loss of both, and releasing either
 * releases the ticket and tells the others "released". No permit is believed held on a
 * ticket another one released.
 *
 * Nothing stays held that no one believes it holds. A ticket that leaves the session
 * without a permit owning it (its acquire's outcome unknown, timed out, or aborted) is
 * released in the background; a release whose outcome is unknown is retried every second
 * until it is known or the session has ended.
 *
 * It must never: move a deadline earlier than an acknowledged keep-alive allows nor later
 * than one does, un-lose a permit, or ask the cluster for a ticket it was told is done.
 */

import { asyncDispose } from "./dispose.js";
import { KEEPALIVES_PER_TTL, LOOK_EVERY_MS, bootNowMs, deadlineAfterMs } from "./clock.js";
import {
  Forbidden,
  ProtocolError,
  Refused,
  SessionLost,
  TimedOut,
  Unauthenticated,
  UnknownSession,
  WeirError,
  namePart,
  refusal,
} from "./errors.js";
import { Lease, type LeaseOptions } from "./lease.js";
import { plantedOn } from "./planted.js";
import { type Transport, jittered, sleep } from "./transport.js";
import {
  type CostSettlement,
  type Halt,
  type Lost,
  type Part,
  type Priority,
  describeLost,
  parseHaltScope,
  partJson,
} from "./types.js";

/** How soon a keep-alive that got no acknowledgement is tried again (ms, or TTL/5). */
const KEEPALIVE_RETRY_MS = 100;
/** How often an unanswered keep-alive or acquire looks whether it should be hedged (ms). */
const HEDGE_LOOK_MS = 50;
/** A write is hedged only when less than this is left of the belief (ms). */
const HEDGE_WHEN_LEFT_MS = 1600;
/** ... and only once it has gone unanswered this long (ms). */
const HEDGE_AFTER_MS = 400;
/** Pause between the tries of a background release (ms). */
const RELEASE_PAUSE_MS = 1000;
/** Pause before the event stream is opened again after it failed (ms), jittered. */
const STREAM_PAUSE_MS = 200;

const LOST_DEADLINE: Lost = Object.freeze({ kind: "deadline" });
const LOST_EXPIRED: Lost = Object.freeze({ kind: "expired" });
const LOST_CLOSED: Lost = Object.freeze({ kind: "closed" });
const LOST_RELEASED: Lost = Object.freeze({ kind: "released" });

/** A path segment, percent-encoded. */
export function q(segment: string): string {
  return encodeURIComponent(segment);
}

/** The reason a permit's `signal` aborts with: why it may no longer be held. */
export class PermitLost extends WeirError {
  override name = "PermitLost";
  constructor(readonly lost: Lost) {
    super(`permit lost: ${describeLost(lost)}`);
  }
}

/** A granted ticket: which halts cover it, and why it may be lost. */
class Held {
  lost: Lost | null = null;
  /** The other permits of its ticket, asked again while it was held (only on the entry
   * the session's `held` map names): one holding, told every loss it is told. */
  twins: Held[] = [];
  readonly abort = new AbortController();
  readonly lostPromise: Promise<Lost>;
  private resolveLost!: (why: Lost) => void;
  constructor(
    readonly tenant: string,
    readonly agent: string | null,
  ) {
    this.lostPromise = new Promise<Lost>((resolve) => {
      this.resolveLost = resolve;
    });
  }
  /** Marks the permit lost for `why` (the first reason stays, unless `replace`). */
  setLost(why: Lost, replace = false): void {
    // PLANTED(ts-told-late): a loss learned now reaches the application 3 s later.
    if (plantedOn("ts-told-late")) {
      setTimeout(() => this.markLost(why, replace), 3000).unref();
      return;
    }
    this.markLost(why, replace);
  }

  private markLost(why: Lost, replace: boolean): void {
    for (const twin of this.twins) twin.markLost(why, replace);
    if (this.lost !== null && !replace) return;
    this.lost = why;
    this.resolveLost(why);
    if (!this.abort.signal.aborted) this.abort.abort(new PermitLost(why));
  }
}

interface Grant {
  fence: number;
  units: number;
  held: Held;
}

/** A ticket whose acquire was sent and not yet granted. */
interface Waiting {
  path: string;
  body: Record<string, unknown>;
  tenant: string;
  agent: string | null;
  resolve: (outcome: Grant | WeirError) => void;
  outcome: Promise<Grant | WeirError>;
  /** A loss learned before the grant (a halt): the permit starts lost. */
  lost: Lost | null;
  /** Tickets ahead of it when the cluster last answered `queued`. */
  position: number | null;
}

/** What an acquire asks for. */
export interface AcquireOptions {
  /** Units of the limit (default 1). */
  units?: number;
  /** The key of a keyed limit. */
  key?: string;
  /** More limits of the tenant, granted with this one under one fence or none charged. */
  parts?: readonly Part[];
  /** A level (higher first), or a level with a fairness key and weight. */
  priority?: number | Priority;
  /** The acting agent (agent halts cover it). */
  agent?: string;
  /** false: refuse with Busy at once when there is no room (default true: wait). */
  wait?: boolean;
  /** Longest wait for a grant (ms); then TimedOut and the ticket is withdrawn. */
  timeoutMs?: number;
  /** The tenant (default: the session's). */
  tenant?: string;
  /** The rate parts' units are an estimate, settled later with `permit.settle(cost)`. */
  estimate?: boolean;
  /** Asks with this ticket number instead of the session's next one: asking again with
   * the ticket of an earlier acquire of this session is a re-ask, answered as before
   * (granted with the same fence while it is held, charging nothing twice). Asked again
   * while this session holds it, the two permits are one holding: a halt, the deadline or
   * the session's end tells both, and releasing either releases the ticket and tells the
   * other (`lost` kind "released"). For drivers and recovery tools. */
  ticket?: number;
  /** Gives the acquire up: the ticket is withdrawn and the acquire rejects with the
   * signal's reason. */
  signal?: AbortSignal;
}

/** A promise's outcome without throwing. */
type Settled<T> = { ok: true; value: T } | { ok: false; error: unknown };

function settle<T>(p: Promise<T>): Promise<Settled<T>> {
  return p.then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, error }),
  );
}

function unwrap<T>(s: Settled<T>): T {
  if (s.ok) return s.value;
  throw s.error;
}

/** A one-shot wake-up: `wait()` resolves after the next `set()` (or at once if set). */
class Wake {
  private flag = false;
  private waiter: (() => void) | null = null;
  set(): void {
    this.flag = true;
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }
  async wait(): Promise<void> {
    if (!this.flag) await new Promise<void>((resolve) => (this.waiter = resolve));
    this.flag = false;
  }
}

/**
 * A held permit: its fence, whether it may be lost, and its release.
 *
 * Believed held from its grant until `release()` is called (the belief ends before the
 * release is sent) or until `lostReason()` is not null. `lost` resolves and `signal`
 * aborts (with a {@link PermitLost}) when it may no longer be held. Works with
 * `await using` (released on leaving the block) and with try/finally.
 */
export class Permit {
  readonly tenant: string;
  readonly limit: string;
  /** The key of `limit` (a keyed limit), else null. */
  readonly key: string | null;
  /** Every part granted under this permit's fence, its own limit first. */
  readonly parts: readonly Part[];
  /** Whether the rate parts' units are an estimate, to `settle`. */
  readonly estimate: boolean;
  readonly ticket: number;
  /** The log index of the grant: pass it downstream so a stale holder is rejected. */
  readonly fence: number;
  readonly units: number;
  private released_ = false;

  /** @internal */
  constructor(
    readonly session: Session,
    request: Request,
    ticket: number,
    private readonly grant: Grant,
  ) {
    this.tenant = request.tenant;
    this.limit = request.limit;
    this.key = request.key;
    this.parts = request.parts;
    this.estimate = request.estimate;
    this.ticket = ticket;
    this.fence = grant.fence;
    this.units = grant.units;
  }

  /** Aborts when the permit may no longer be held (its reason: a {@link PermitLost}). */
  get signal(): AbortSignal {
    return this.grant.held.abort.signal;
  }

  /** Resolves with why, when the permit may no longer be held: the belief deadline
   * passed, a halt covers it, or the session expired or was closed. */
  get lost(): Promise<Lost> {
    return this.grant.held.lostPromise;
  }

  get released(): boolean {
    return this.released_;
  }

  /** Why the permit may no longer be held, or null while it is believed held. */
  lostReason(): Lost | null {
    const held = this.grant.held;
    if (held.lost !== null) return held.lost;
    if (bootNowMs() >= this.session.toldAtMs()) return LOST_DEADLINE;
    return null;
  }

  /**
   * Settles a permit acquired with `estimate: true` at its actual cost in tokens, on every
   * rate part: below the estimate the unused tokens return to the bucket, above it the
   * difference is charged and reported. Idempotent (a retry answers `duplicate`).
   */
  async settle(cost: number): Promise<CostSettlement> {
    if (!this.estimate) {
      throw new TypeError(`${this.tenant}/${this.limit} fence ${this.fence}: only a permit acquired with estimate: true settles`);
    }
    if (!Number.isInteger(cost) || cost < 0) throw new RangeError("cost must be a whole number of tokens, at least 0");
    const s = this.session;
    const answer = (await s.transport.call("POST", `/v1/sessions/${s.id}/settle`, {
      ticket: this.ticket,
      cost,
    })) as Record<string, unknown> | null;
    if (answer === null || typeof answer !== "object") throw new ProtocolError(`settle answered ${JSON.stringify(answer)}`);
    const status = answer["status"] === "overrun" ? "overrun" : "settled";
    const overrunTokens = status === "overrun" ? Number(answer["overrun_tokens"] ?? 0) : 0;
    const duplicate = Boolean(answer["duplicate"]) && overrunTokens === 0;
    const one = this.parts.length === 1 ? this.units : null;
    return {
      status,
      duplicate,
      overrunTokens,
      returnedTokens: one === null ? null : duplicate ? 0 : Math.max(0, one - cost),
    };
  }

  /**
   * Releases the permit and waits for the cluster to apply it. The belief ends before the
   * release is sent (G2). If its outcome is unknown it throws, and the release goes on in
   * the background until its outcome is known or the session has ended. Calling it again
   * does nothing.
   */
  async release(): Promise<void> {
    if (this.released_) return;
    this.released_ = true;
    const s = this.session;
    s.forget(this.ticket, this.grant.held);
    try {
      await s.transport.call("POST", `/v1/sessions/${s.id}/release`, { ticket: this.ticket });
    } catch (e) {
      if (e instanceof Refused) return; // UnknownSession: the session's end freed it.
      if (e instanceof Unauthenticated || e instanceof Forbidden || e instanceof ProtocolError) throw e;
      s.releaseInBackground(this.ticket, true);
      throw e;
    }
  }

  /** `release()`, its failure kept to the background retry (for finally blocks). */
  async releaseQuietly(): Promise<void> {
    try {
      await this.release();
    } catch {
      // The release goes on in the background (release()).
    }
  }

  async [asyncDispose](): Promise<void> {
    await this.releaseQuietly();
  }
}

/** What an acquire asks for, with its ticket's body. */
interface Request {
  tenant: string;
  limit: string;
  key: string | null;
  units: number;
  /** The request's own limit first, then the caller's parts (what a refusal names). */
  parts: readonly Part[];
  estimate: boolean;
  priority: Required<Priority>;
  agent: string | null;
}

function requestBody(r: Request, session: number, ticket: number, wait: boolean): Record<string, unknown> {
  const body: Record<string, unknown> = {
    session,
    ticket,
    units: r.units,
    priority: r.priority.level,
    fairness_key: r.priority.fairnessKey,
    weight: r.priority.weight,
    wait,
    timeout_ms: 0,
  };
  if (r.key !== null) body["key"] = r.key;
  if (r.parts.length > 1) body["parts"] = r.parts.slice(1).map(partJson);
  if (r.estimate) body["estimate"] = true;
  if (r.agent !== null) body["agent"] = r.agent;
  return body;
}

/**
 * A session: the client's identity on the cluster, kept alive in the background (module
 * doc). Open one with `client.session()`; close it with `close()` or `await using`.
 */
export class Session {
  private deadline: number;
  private nextTicket = 1;
  private readonly waiting = new Map<number, Waiting>();
  private readonly held = new Map<number, Held>();
  private ended_: Lost | null = null;
  private readonly reaskWanted = new Wake();
  private streamUp = false;
  private readonly streamWaiters: (() => void)[] = [];
  /** Aborted when the session ends: stops its loops. */
  private readonly stopping = new AbortController();
  /** Keep-alives acknowledged, keep-alives hedged, and every write hedged. */
  keepalivesAcknowledged = 0;
  keepalivesHedged = 0;
  writesHedged = 0;

  /** @internal */
  constructor(
    /** @internal */ readonly transport: Transport,
    readonly id: number,
    readonly ttlMs: number,
    deadlineMs: number,
    private readonly tenant: string,
    private readonly onClose: (s: Session) => void,
  ) {
    this.deadline = deadlineMs;
  }

  /** @internal Opens a session with a TTL of `ttlMs` (the cluster may grant less). */
  static async open(transport: Transport, ttlMs: number, tenant: string, onClose: (s: Session) => void): Promise<Session> {
    if (!(ttlMs > 0)) throw new RangeError("ttlMs must be positive");
    const sent = bootNowMs();
    const answer = (await transport.call("POST", "/v1/sessions", { ttl_ms: Math.round(ttlMs) })) as Record<
      string,
      unknown
    > | null;
    if (answer === null || typeof answer !== "object" || typeof answer["session"] !== "number") {
      throw new ProtocolError(`open session answered ${JSON.stringify(answer)}`);
    }
    const granted = Math.min(ttlMs, typeof answer["ttl_ms"] === "number" ? answer["ttl_ms"] : ttlMs);
    const session = new Session(transport, answer["session"], granted, deadlineAfterMs(sent, granted), tenant, onClose);
    session.start();
    return session;
  }

  private start(): void {
    const loops: Promise<void>[] = [this.renew(), this.watchDeadline(), this.follow(), this.reasker()];
    for (const loop of loops) {
      loop.catch((e: unknown) => {
        if (!this.stopping.signal.aborted) throw e;
      });
    }
  }

  // -- what callers read -------------------------------------------------------------------

  /** The belief deadline, on `bootNowMs()`'s clock (ms). */
  get deadlineMs(): number {
    return this.deadline;
  }

  /** @internal When the application is told that the belief deadline passed (`lost`,
   * `signal`, `lostReason()`): at the deadline itself. */
  toldAtMs(): number {
    // PLANTED(ts-told-late): the application is told 3 s after the deadline.
    if (plantedOn("ts-told-late")) return this.deadline + 3000;
    return this.deadline;
  }

  /** Milliseconds until the belief deadline (negative once passed). */
  deadlineLeftMs(): number {
    return this.deadline - bootNowMs();
  }

  /** @internal Aborts when the session ends. */
  get stopSignal(): AbortSignal {
    return this.stopping.signal;
  }

  /** Why the session ended (expired, closed), or null while it lives. */
  get ended(): Lost | null {
    return this.ended_;
  }

  /** Whether the event stream is connected now. */
  get eventsConnected(): boolean {
    return this.streamUp;
  }

  /** Waits (at most `timeoutMs`) until the event stream is connected. */
  async waitEventsConnected(timeoutMs: number): Promise<boolean> {
    if (this.streamUp) return true;
    return Promise.race([
      new Promise<boolean>((resolve) => this.streamWaiters.push(() => resolve(true))),
      sleep(timeoutMs).then(() => this.streamUp),
    ]);
  }

  /** While an acquire waits: how many tickets were ahead of it when the cluster last
   * answered `queued`. */
  queuedPosition(): number | null {
    for (const w of this.waiting.values()) if (w.position !== null) return w.position;
    return null;
  }

  // -- acquire -----------------------------------------------------------------------------

  /**
   * Acquires units of `limit`. Resolves with a permit once granted (at once when there is
   * room; otherwise its grant comes on the event stream), or rejects with the refusal
   * (`Busy` with `wait: false`, `Halted`, `TooLarge`, `UnknownLimit`, ... naming the part
   * that refused), `TimedOut`, `SessionLost`, or the `signal`'s reason.
   */
  async acquire(limit: string, options: AcquireOptions = {}): Promise<Permit> {
    const p = options.priority;
    const priority: Required<Priority> =
      typeof p === "number" || p === undefined
        ? { level: p ?? 0, fairnessKey: "", weight: 1 }
        : { level: p.level ?? 0, fairnessKey: p.fairnessKey ?? "", weight: p.weight ?? 1 };
    const units = options.units ?? 1;
    const key = options.key ?? null;
    const request: Request = {
      tenant: options.tenant ?? this.tenant,
      limit,
      key,
      units,
      parts: [{ limit, units, ...(key !== null ? { key } : {}) }, ...(options.parts ?? [])],
      estimate: options.estimate ?? false,
      priority,
      agent: options.agent ?? null,
    };
    return this.acquireRequest(request, options.wait ?? true, options.timeoutMs, options.signal, options.ticket);
  }

  /**
   * Acquires, runs `work` with the permit's loss signal (aborted when the permit may be
   * lost), and releases the permit when `work` settles, whichever way. Answers what `work`
   * answers.
   */
  async withPermit<T>(
    limit: string,
    work: (signal: AbortSignal, permit: Permit) => Promise<T>,
    options: AcquireOptions = {},
  ): Promise<T> {
    const permit = await this.acquire(limit, options);
    try {
      return await work(permit.signal, permit);
    } finally {
      await permit.releaseQuietly();
    }
  }

  private async acquireRequest(
    request: Request,
    wait: boolean,
    timeoutMs: number | undefined,
    signal: AbortSignal | undefined,
    asTicket: number | undefined,
  ): Promise<Permit> {
    if (this.ended_ !== null) throw new SessionLost(`session ${this.id} ended: ${describeLost(this.ended_)}`, this.ended_);
    signal?.throwIfAborted();
    if (asTicket !== undefined && !(Number.isSafeInteger(asTicket) && asTicket >= 0)) {
      throw new RangeError("ticket must be a whole number, at least 0");
    }
    if (asTicket !== undefined && this.held.has(asTicket)) return this.askAgain(request, asTicket, wait, signal);
    const ticket = asTicket ?? this.nextTicket;
    this.nextTicket = Math.max(this.nextTicket, ticket + 1);
    const path = `/v1/tenants/${q(request.tenant)}/limits/${q(request.limit)}/acquire`;
    const body = requestBody(request, this.id, ticket, wait);
    let resolve!: (outcome: Grant | WeirError) => void;
    const outcome = new Promise<Grant | WeirError>((r) => (resolve = r));
    // Registered before it is sent: a grant on the event stream ahead of the answer finds it.
    this.waiting.set(ticket, {
      path,
      body,
      tenant: request.tenant,
      agent: request.agent,
      resolve,
      outcome,
      lost: null,
      position: null,
    });
    const started = performance.now();
    let armed = true;
    try {
      try {
        this.answered(ticket, await this.hedged("POST", path, body, signal));
      } catch (e) {
        if (e instanceof Refused) {
          this.refused(ticket, e);
        } else {
          if (e instanceof WeirError && e.definitelyFailed) {
            armed = false;
            this.waiting.delete(ticket);
          }
          throw e;
        }
      }
      const leftMs = timeoutMs === undefined ? null : Math.max(0, timeoutMs - (performance.now() - started));
      const stop = new AbortController();
      const onAbort = (): void => stop.abort();
      signal?.addEventListener("abort", onAbort, { once: true });
      let got: Grant | WeirError | "timeout" | "aborted";
      try {
        const racers: Promise<Grant | WeirError | "timeout" | "aborted">[] = [outcome];
        if (leftMs !== null) racers.push(sleep(leftMs, stop.signal).then(() => "timeout" as const));
        if (signal) racers.push(sleep(2 ** 31 - 1, stop.signal).then(() => "aborted" as const, () => "aborted" as const));
        got = await Promise.race(racers.map((r) => r.catch(() => "aborted" as const)));
      } finally {
        signal?.removeEventListener("abort", onAbort);
        stop.abort();
      }
      if (got === "timeout" || got === "aborted") {
        armed = false;
        await this.withdraw(ticket);
        if (got === "timeout") throw new TimedOut(`${request.tenant}/${request.limit}: still waiting after ${timeoutMs} ms`);
        throw signal?.reason;
      }
      armed = false;
      if (got instanceof Refused) throw namePart(got, request.parts);
      if (got instanceof WeirError) throw got;
      return new Permit(this, request, ticket, got);
    } finally {
      if (armed) this.abandon(ticket);
    }
  }

  // -- token leases ------------------------------------------------------------------------

  /**
   * Leases a share of a rate limit (or of one key) for this session: takes on it are then
   * decided locally while the lease has tokens (`lease.ts`). The first request is answered
   * before this resolves; a refusal (Halted, UnknownLimit, a limit that is not rate-only)
   * throws.
   */
  async lease(limit: string, options: LeaseOptions): Promise<Lease> {
    if (this.ended_ !== null) throw new SessionLost(`session ${this.id} ended: ${describeLost(this.ended_)}`, this.ended_);
    const lease = new Lease(this, options.tenant ?? this.tenant, limit, options);
    await lease.open();
    return lease;
  }

  // -- the tickets -------------------------------------------------------------------------

  private answered(ticket: number, answer: unknown): void {
    const a = (answer ?? {}) as Record<string, unknown>;
    if (a["status"] === "granted") {
      this.granted(ticket, Number(a["fence"]), Number(a["units"] ?? 1));
    } else if (a["status"] === "queued") {
      const w = this.waiting.get(ticket);
      if (w !== undefined && typeof a["position"] === "number") w.position = a["position"];
    } else {
      this.refused(ticket, new ProtocolError(`unexpected answer to an acquire: ${JSON.stringify(answer)}`));
    }
  }

  private granted(ticket: number, fence: number, units: number): void {
    const w = this.waiting.get(ticket);
    this.transport.log(`session ${this.id} ticket ${ticket}: granted fence ${fence}${w === undefined ? " (not waiting: ignored)" : ""}`);
    if (w === undefined) return;
    this.waiting.delete(ticket);
    const held = new Held(w.tenant, w.agent);
    const lost = this.ended_ ?? w.lost;
    if (lost !== null) held.setLost(lost);
    this.held.set(ticket, held);
    w.resolve({ fence, units, held });
  }

  private refused(ticket: number, error: WeirError): void {
    if (error instanceof UnknownSession) {
      this.end(LOST_EXPIRED);
      return;
    }
    const w = this.waiting.get(ticket);
    if (w === undefined) return;
    this.waiting.delete(ticket);
    w.resolve(error);
  }

  private lose(ticket: number, why: Lost): void {
    const held = this.held.get(ticket);
    if (held !== undefined) {
      held.setLost(why);
      return;
    }
    const w = this.waiting.get(ticket);
    if (w !== undefined && w.lost === null) w.lost = why;
  }

  /** @internal The permit of `ticket` whose entry is `held` is released: the ticket is
   * no longer the session's, and any other permit of it (asked again) not lost already is
   * told "released". */
  forget(ticket: number, held: Held): void {
    const first = this.held.get(ticket);
    if (first === undefined) return;
    const holding = [first, ...first.twins];
    if (!holding.includes(held)) return;
    this.held.delete(ticket);
    first.twins = []; // so that telling `first` does not tell `held`
    for (const other of holding) if (other !== held) other.setLost(LOST_RELEASED);
  }

  /** Asks again for `ticket`, which this session holds: the cluster answers its grant
   * (idempotent by session and ticket), and the new permit joins the held one's holding
   * (`Held.twins`). Nothing is registered, so a failure leaves the ticket with the permit
   * that holds it. */
  private async askAgain(request: Request, ticket: number, wait: boolean, signal: AbortSignal | undefined): Promise<Permit> {
    const path = `/v1/tenants/${q(request.tenant)}/limits/${q(request.limit)}/acquire`;
    let answer: unknown;
    try {
      answer = await this.hedged("POST", path, requestBody(request, this.id, ticket, wait), signal);
    } catch (e) {
      if (e instanceof Refused) throw namePart(e, request.parts);
      throw e;
    }
    const a = (answer ?? {}) as Record<string, unknown>;
    if (a["status"] !== "granted") throw new ProtocolError(`unexpected answer to a held ticket: ${JSON.stringify(answer)}`);
    const first = this.held.get(ticket);
    if (first === undefined) {
      // Released meanwhile through its other permit: the grant answered is held no more.
      throw refusal("TicketReleased", `ticket ${ticket} of session ${this.id} was released meanwhile`, { session: this.id, ticket });
    }
    const held = new Held(request.tenant, request.agent);
    first.twins.push(held);
    if (first.lost !== null) held.setLost(first.lost);
    return new Permit(this, request, ticket, { fence: Number(a["fence"]), units: Number(a["units"] ?? 1), held });
  }

  private end(why: Lost): void {
    if (this.ended_ === null) {
      this.ended_ = why;
      this.transport.log(`session ${this.id} ended: ${describeLost(why)}`);
    }
    for (const held of this.held.values()) held.setLost(why, true);
    this.held.clear();
    const waiting = [...this.waiting.values()];
    this.waiting.clear();
    for (const w of waiting) w.resolve(new SessionLost(`session ${this.id} ended: ${describeLost(why)}`, why));
    this.stopping.abort();
    this.reaskWanted.set();
  }

  private abandon(ticket: number): void {
    this.transport.log(`session ${this.id} ticket ${ticket}: abandoned, released in the background`);
    this.waiting.delete(ticket);
    this.held.delete(ticket);
    this.releaseInBackground(ticket, false);
  }

  private async withdraw(ticket: number): Promise<void> {
    this.transport.log(`session ${this.id} ticket ${ticket}: withdrawn`);
    this.waiting.delete(ticket);
    this.held.delete(ticket);
    try {
      await this.transport.call("POST", `/v1/sessions/${this.id}/release`, { ticket });
    } catch (e) {
      if (e instanceof Refused) return;
      if (e instanceof WeirError) this.releaseInBackground(ticket, true);
      else throw e;
    }
  }

  /** @internal Releases `ticket` until the outcome is known or the session has ended. */
  releaseInBackground(ticket: number, pauseFirst: boolean): void {
    void this.releaseUntilKnown(ticket, pauseFirst).catch(() => undefined);
  }

  private async releaseUntilKnown(ticket: number, pauseFirst: boolean): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      if (attempt > 0 || pauseFirst) await sleep(jittered(RELEASE_PAUSE_MS));
      if (this.ended_ !== null && this.ended_.kind !== "deadline") return; // its end freed it
      if (this.transport.closed) return;
      try {
        await this.transport.call("POST", `/v1/sessions/${this.id}/release`, { ticket });
        this.transport.log(`session ${this.id} ticket ${ticket}: released in the background`);
        return;
      } catch (e) {
        if (!(e instanceof WeirError)) return;
        this.transport.log(`session ${this.id} ticket ${ticket}: background release, try ${attempt + 1}: ${e.message}`);
        if (e instanceof Refused || e instanceof Unauthenticated || e instanceof Forbidden || e instanceof ProtocolError) {
          return;
        }
      }
    }
  }

  // -- background work ---------------------------------------------------------------------

  /** Keep-alives every TTL/5 (sooner after one that was not acknowledged). */
  private async renew(): Promise<void> {
    const every = this.ttlMs / KEEPALIVES_PER_TTL;
    let next = performance.now() + every;
    while (this.ended_ === null && !this.transport.closed) {
      const wait = next - performance.now();
      if (wait > 0) {
        await sleep(wait, this.stopping.signal);
        continue;
      }
      next = await this.keepAlive(every);
    }
  }

  /** Marks every held permit lost once the belief deadline passes (module doc). */
  private async watchDeadline(): Promise<void> {
    while (this.ended_ === null && !this.transport.closed) {
      const left = this.toldAtMs() - bootNowMs();
      if (left <= 0) {
        for (const held of this.held.values()) held.setLost(LOST_DEADLINE);
      }
      await sleep(left > 0 ? Math.min(left, LOOK_EVERY_MS) : LOOK_EVERY_MS, this.stopping.signal);
    }
  }

  /** One keep-alive; answers when the next is due (performance.now()). */
  private async keepAlive(every: number): Promise<number> {
    const due = performance.now() + every;
    const sent = bootNowMs();
    let answer: unknown;
    try {
      answer = await this.hedged("POST", `/v1/sessions/${this.id}/keepalive`, undefined);
    } catch (e) {
      if (e instanceof UnknownSession) {
        this.end(LOST_EXPIRED);
        return due;
      }
      if (!(e instanceof WeirError)) throw e;
      this.transport.log(
        `session ${this.id} keep-alive failed (${e.message}), ${(this.deadline - bootNowMs()).toFixed(0)} ms before the deadline`,
      );
      return performance.now() + Math.min(KEEPALIVE_RETRY_MS, every);
    }
    if ((answer as Record<string, unknown> | null)?.["status"] === "kept_alive") {
      this.extend(sent);
      this.keepalivesAcknowledged += 1;
      return due;
    }
    return performance.now() + Math.min(KEEPALIVE_RETRY_MS, every);
  }

  /**
   * An idempotent write of this session (a keep-alive, an acquire) to the current node,
   * hedged to the others once it has gone unanswered for HEDGE_AFTER_MS with less than
   * HEDGE_WHEN_LEFT_MS of the belief left, whether or not the node is heard from: the
   * first answer wins, and the other copy is given up. (A token lease's requests, idempotent
   * by their `seq`, go the same way: `lease.ts`.)
   * @internal
   */
  async hedged(method: string, path: string, body: unknown, signal?: AbortSignal): Promise<unknown> {
    const done = new AbortController();
    const onAbort = (): void => done.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    const primary = settle(this.transport.call(method, path, body, { signal: done.signal }));
    const sent = performance.now();
    try {
      for (;;) {
        const first = await Promise.race([primary, sleep(HEDGE_LOOK_MS).then(() => null)]);
        if (first !== null) return unwrap(first);
        if (
          this.deadline - bootNowMs() < HEDGE_WHEN_LEFT_MS &&
          this.transport.nodes.length > 1 &&
          performance.now() - sent >= HEDGE_AFTER_MS
        ) {
          break;
        }
      }
      this.writesHedged += 1;
      if (path.endsWith("/keepalive")) this.keepalivesHedged += 1;
      this.transport.log(`session ${this.id} ${path} unanswered for ${(performance.now() - sent).toFixed(0)} ms near its deadline; hedged`);
      const hedge = settle(this.transport.hedge(method, path, body, done.signal));
      const first = await Promise.race([primary.then((s) => ["primary", s] as const), hedge.then((s) => ["hedge", s] as const)]);
      if (first[0] === "primary") return unwrap(first[1]);
      if (first[1].ok) return first[1].value;
      return unwrap(await primary);
    } finally {
      signal?.removeEventListener("abort", onAbort);
      done.abort();
    }
  }

  private extend(sent: number): void {
    const next = deadlineAfterMs(sent, this.ttlMs);
    if (next > this.deadline) this.deadline = next;
  }

  /** Follows the session's events; (re)connects as long as the session lives. */
  private async follow(): Promise<void> {
    const path = `/v1/sessions/${this.id}/events`;
    while (this.ended_ === null && !this.transport.closed) {
      try {
        await this.transport.stream(path, () => this.onOpen(), (n, d) => this.onEvent(n, d), this.stopping.signal);
      } catch (e) {
        if (this.stopping.signal.aborted) return;
        if (e instanceof UnknownSession) {
          // A node behind the leader may not know the session yet: ask the leader.
          if (await this.gone()) return;
          this.transport.moveOn(this.transport.current);
        } else if (e instanceof Unauthenticated || e instanceof Forbidden) {
          await sleep(1000, this.stopping.signal);
        } else if (!(e instanceof WeirError)) {
          throw e;
        }
      } finally {
        this.streamUp = false;
      }
      if (this.ended_ === null) await sleep(jittered(STREAM_PAUSE_MS), this.stopping.signal);
    }
  }

  /** Whether the session is gone on the cluster (a keep-alive says so). */
  private async gone(): Promise<boolean> {
    const sent = bootNowMs();
    try {
      const answer = await this.transport.call("POST", `/v1/sessions/${this.id}/keepalive`);
      if ((answer as Record<string, unknown> | null)?.["status"] === "kept_alive") this.extend(sent);
      return false;
    } catch (e) {
      if (e instanceof UnknownSession) {
        this.end(LOST_EXPIRED);
        return true;
      }
      return false;
    }
  }

  private onOpen(): void {
    this.streamUp = true;
    for (const w of this.streamWaiters.splice(0)) w();
    this.reaskWanted.set();
  }

  private onEvent(name: string, data: string): void {
    let event: unknown;
    try {
      event = JSON.parse(data);
    } catch {
      return;
    }
    if (event === null || typeof event !== "object") return;
    const e = event as Record<string, unknown>;
    if (name === "lagged") {
      this.reaskWanted.set();
      return;
    }
    if (e["session"] !== this.id) return;
    const ticket = e["ticket"];
    if (name === "granted" && typeof ticket === "number") {
      this.granted(ticket, Number(e["fence"]), Number(e["units"] ?? 1));
    } else if (name === "refused" && typeof ticket === "number") {
      if (this.waiting.has(ticket)) {
        void this.typedRefusal(ticket, String(e["error"] ?? ""), String(e["message"] ?? "")).catch(() => undefined);
      }
    } else if (name === "halted" && typeof ticket === "number") {
      const scope = parseHaltScope(e["scope"]) ?? { agent: null };
      this.lose(ticket, { kind: "halted", scope, reason: String(e["reason"] ?? "") });
    } else if (name === "expired") {
      this.end(LOST_EXPIRED);
    }
  }

  /** A waiting ticket was refused: one more ask answers the refusal with its fields (the
   * event carries only its name and text). */
  private async typedRefusal(ticket: number, name: string, message: string): Promise<void> {
    const w = this.waiting.get(ticket);
    if (w === undefined) return;
    try {
      this.answered(ticket, await this.transport.call("POST", w.path, w.body));
    } catch (e) {
      if (e instanceof Refused) this.refused(ticket, e);
      else this.refused(ticket, refusal(name, message));
    }
  }

  private async reasker(): Promise<void> {
    while (this.ended_ === null) {
      await this.reaskWanted.wait();
      if (this.ended_ !== null) return;
      await this.reask();
    }
  }

  /** Asks again for every waiting ticket (idempotent), then reads the halts of every tenant
   * it holds permits of. */
  private async reask(): Promise<void> {
    for (const [ticket, w] of [...this.waiting.entries()]) {
      if (!this.waiting.has(ticket)) continue;
      try {
        this.answered(ticket, await this.transport.call("POST", w.path, w.body));
      } catch (e) {
        if (e instanceof Refused) this.refused(ticket, e);
        else if (!(e instanceof WeirError)) throw e;
      }
    }
    const tenants = [...new Set([...this.held.values()].map((h) => h.tenant))].sort();
    for (const tenant of tenants) {
      let answer: unknown;
      try {
        answer = await this.transport.call("GET", `/v1/tenants/${q(tenant)}/halts`);
      } catch {
        continue;
      }
      const list = (answer as Record<string, unknown> | null)?.["halts"];
      if (Array.isArray(list)) this.learnHalts(tenant, list.map(haltFromJson));
    }
  }

  private learnHalts(tenant: string, halts: Halt[]): void {
    for (const held of this.held.values()) {
      if (held.tenant !== tenant || held.lost !== null) continue;
      const h = halts.find((h) => h.scope.agent === null || h.scope.agent === held.agent);
      if (h !== undefined) held.setLost({ kind: "halted", scope: h.scope, reason: h.reason });
    }
  }

  // -- the end -----------------------------------------------------------------------------

  /**
   * Closes the session: every permit is released and every ticket withdrawn. Throws if the
   * cluster did not confirm it (the session then expires after its TTL).
   */
  async close(): Promise<void> {
    if (this.ended_?.kind === "closed") return;
    this.end(LOST_CLOSED);
    this.onClose(this);
    try {
      await this.transport.call("DELETE", `/v1/sessions/${this.id}`);
    } catch (e) {
      if (!(e instanceof UnknownSession)) throw e;
    }
  }

  async [asyncDispose](): Promise<void> {
    try {
      await this.close();
    } catch {
      // Not confirmed: the session expires after its TTL.
    }
  }
}

/** A halt as the halt list writes it. */
export function haltFromJson(value: unknown): Halt {
  const v = (value ?? {}) as Record<string, unknown>;
  return { scope: parseHaltScope(v["scope"], v["agent"]) ?? { agent: null }, reason: String(v["reason"] ?? "") };
}
