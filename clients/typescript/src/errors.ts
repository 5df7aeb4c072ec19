/**
 * Typed errors. Every error is a {@link WeirError}; tell them apart with `instanceof`.
 *
 * - {@link Refused}: the cluster decided and said no (halted, busy, over a ceiling or a
 *   budget, unknown limit, ...); nothing was done. Each subclass reads the refusal's
 *   fields from the server's JSON error body (`{error: NAME, message: TEXT, ...fields}`);
 *   `fields` keeps the whole body.
 * - Failures that say whether the request may have taken effect: {@link OutcomeUnknown}
 *   (sent, and may or may not have been applied; every write is idempotent, so sending it
 *   again is safe) versus {@link Unavailable} (no node served it: not applied).
 *   `definitelyFailed` is false only for OutcomeUnknown.
 * - {@link Unauthenticated} (HTTP 401) and {@link Forbidden} (HTTP 403).
 * - An acquire adds {@link TimedOut} and {@link SessionLost}.
 */

import type { HaltScope, Lost, Part } from "./types.js";
import { parseHaltScope } from "./types.js";

/** Any error of this client. */
export class WeirError extends Error {
  override name = "WeirError";
  /** Whether the request certainly did not take effect (false only for OutcomeUnknown). */
  get definitelyFailed(): boolean {
    return true;
  }
}

/** The request was sent and may or may not have been applied. Writes are idempotent:
 * sending the same one again is safe. */
export class OutcomeUnknown extends WeirError {
  override name = "OutcomeUnknown";
  override get definitelyFailed(): boolean {
    return false;
  }
}

/** No node could serve the request (unreachable, no leader); it was not applied. */
export class Unavailable extends WeirError {
  override name = "Unavailable";
}

/** No token, or an unknown one, was sent to a cluster that requires one (HTTP 401). */
export class Unauthenticated extends WeirError {
  override name = "Unauthenticated";
}

/** The token's role may not do this (HTTP 403). */
export class Forbidden extends WeirError {
  override name = "Forbidden";
}

/** A node answered something this client does not understand, or TLS verification
 * failed. */
export class ProtocolError extends WeirError {
  override name = "ProtocolError";
}

/** The node's certificate did not verify against the CA given (or the system's roots). */
export class TlsUntrusted extends ProtocolError {
  override name = "TlsUntrusted";
}

/** An acquire waited longer than its timeout; its ticket was withdrawn. */
export class TimedOut extends WeirError {
  override name = "TimedOut";
}

/** The session ended (expired or closed) before or while the acquire waited. */
export class SessionLost extends WeirError {
  override name = "SessionLost";
  constructor(
    message: string,
    readonly lost: Lost,
  ) {
    super(message);
  }
}

/** The JSON body of an error answer. */
export type ErrorFields = Readonly<Record<string, unknown>>;

/**
 * The cluster refused the request; nothing was done. `refusal` is the refusal's name as
 * the server gives it ("Halted"), `fields` the whole JSON error body, `status` the HTTP
 * status. `part`: for a refusal of an acquire or a take that names one of its limits, the
 * request's part of that limit (its own limit is the first part).
 */
export class Refused extends WeirError {
  override name = "Refused";
  part: Part | null = null;
  constructor(
    message: string,
    readonly refusal: string,
    readonly fields: ErrorFields = {},
    readonly status: number | null = null,
  ) {
    super(message);
  }
  protected str(key: string): string {
    const v = this.fields[key];
    return v === undefined || v === null ? "" : String(v);
  }
  protected int(key: string): number {
    const v = this.fields[key];
    return typeof v === "number" ? v : 0;
  }
  /** The tenant the refusal is about, when it names one (else ""). */
  get tenant(): string {
    return this.str("tenant");
  }
}

/** No limit by that (tenant, name). */
export class UnknownLimit extends Refused {
  override name = "UnknownLimit";
  get limit(): string {
    return this.str("name");
  }
}

/** The session does not exist (never opened, closed, or expired). */
export class UnknownSession extends Refused {
  override name = "UnknownSession";
}

/** A halt covers the request. */
export class Halted extends Refused {
  override name = "Halted";
  get scope(): HaltScope {
    return parseHaltScope(this.fields["scope"], this.fields["agent"]) ?? { agent: null };
  }
  get reason(): string {
    return this.str("reason");
  }
}

/** More units than the limit could ever grant at once (`max`). */
export class TooLarge extends Refused {
  override name = "TooLarge";
  get limit(): string {
    return this.str("name");
  }
  get units(): number {
    return this.int("units");
  }
  get max(): number {
    return this.int("max");
  }
}

/** No room now (an acquire with `wait: false`, or a take). */
export class Busy extends Refused {
  override name = "Busy";
  /** Milliseconds until a rate bucket has the tokens; null when only a release can make
   * room. */
  get retryAfterMs(): number | null {
    const ms = this.fields["retry_after_ms"];
    if (typeof ms === "number") return ms;
    const header = this.fields["_retry_after_header"];
    return typeof header === "number" ? header * 1000 : null;
  }
}

/** The limit was removed while the ticket waited. */
export class LimitRemoved extends Refused {
  override name = "LimitRemoved";
}

/** The limit's wait queue is full. */
export class QueueFull extends Refused {
  override name = "QueueFull";
}

/** The ticket was already released: a late duplicate of its acquire. */
export class TicketReleased extends Refused {
  override name = "TicketReleased";
}

/** The tenant's running set is at its ceiling. */
export class TooManyRuns extends Refused {
  override name = "TooManyRuns";
  get running(): number {
    return this.int("running");
  }
}

/** The period's budget cannot admit the reserve. */
export class BudgetExhausted extends Refused {
  override name = "BudgetExhausted";
  get spent(): number {
    return this.int("spent");
  }
  get held(): number {
    return this.int("held");
  }
  get budget(): number {
    return this.int("budget");
  }
}

/** A settlement key (tenant, run, epoch) used before with another payload. */
export class Conflict extends Refused {
  override name = "Conflict";
}

/** The request is wrong and will never be admitted as it is; the message says why. */
export class Invalid extends Refused {
  override name = "Invalid";
}

/** A count bound of the cluster is reached (`what`, `limit`). */
export class AtCapacity extends Refused {
  override name = "AtCapacity";
}

/** On a cluster of several Raft groups: a session's request for a tenant another group
 * decides (a session is its group's; a client of that group, `group`, holds its permits),
 * or a placement in another group than the tenant's. */
export class WrongGroup extends Refused {
  override name = "WrongGroup";
  /** The group the tenant lives in. */
  get group(): number {
    return this.int("group");
  }
}

type RefusedClass = new (
  message: string,
  refusal: string,
  fields?: ErrorFields,
  status?: number | null,
) => Refused;

const REFUSALS: Readonly<Record<string, RefusedClass>> = {
  UnknownLimit,
  UnknownSession,
  Halted,
  TooLarge,
  Busy,
  LimitRemoved,
  QueueFull,
  TicketReleased,
  TooManyRuns,
  BudgetExhausted,
  Conflict,
  Invalid,
  BadRequest: Invalid,
  AtCapacity,
  WrongGroup,
};

/** The typed refusal for the server's refusal `name`. */
export function refusal(
  name: string,
  message: string,
  fields: ErrorFields = {},
  status: number | null = null,
): Refused {
  const cls = REFUSALS[name] ?? Refused;
  return new cls(message, name, fields, status);
}

/** Sets `refused.part` to the first of the request's parts whose limit the refusal names
 * (its `name` field); answers `refused`. */
export function namePart(refused: Refused, parts: readonly Part[]): Refused {
  const named = refused.fields["name"];
  refused.part = parts.find((p) => p.limit === named) ?? null;
  return refused;
}

/** The error for an HTTP error answer (status >= 400) whose JSON body is `body`. */
export function fromResponse(
  status: number,
  body: unknown,
  retryAfter: string | null = null,
): WeirError {
  const fields: Record<string, unknown> =
    body !== null && typeof body === "object" && !Array.isArray(body)
      ? { ...(body as Record<string, unknown>) }
      : {};
  const name = typeof fields["error"] === "string" ? fields["error"] : "";
  const text = typeof fields["message"] === "string" ? fields["message"] : "";
  const message = text || `HTTP ${status}`;
  if (retryAfter !== null) {
    const seconds = Number.parseFloat(retryAfter);
    if (Number.isFinite(seconds)) fields["_retry_after_header"] = seconds;
  }
  if (status === 401 || name === "Unauthenticated") return new Unauthenticated(message);
  if (status === 403 || name === "Forbidden") return new Forbidden(message);
  if (name === "NoLeader" || name === "Unavailable") return new Unavailable(`${name}: ${message}`);
  if (name === "OutcomeUnknown") return new OutcomeUnknown(message);
  if (name in REFUSALS) return refusal(name, message, fields, status);
  if (status >= 500 || !name || ["NotFound", "MethodNotAllowed", "Internal"].includes(name)) {
    return new ProtocolError(`HTTP ${status} ${name}: ${message}`.trim());
  }
  return refusal(name, message, fields, status);
}
