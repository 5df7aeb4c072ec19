/**
 * Plain values: why a permit may be lost, priorities, parts, and the shapes of the
 * cluster's answers. Answers keep the server's JSON field names (snake_case, as
 * docs/openapi.yaml writes them); the server may add keys, which stay readable.
 */

/** What a halt covers: the whole tenant (`agent === null`) or one agent in it. */
export interface HaltScope {
  readonly agent: string | null;
}

/** One halt of a tenant. */
export interface Halt {
  readonly scope: HaltScope;
  readonly reason: string;
}

/**
 * Reads a scope as the server writes it: `"Tenant"` or `{"Agent": NAME}` in a refusal,
 * `"tenant"` or `"agent NAME"` in an event, `"tenant"` or `"agent"` with a separate
 * `agent` key in a halt list. Null when it is none of these.
 */
export function parseHaltScope(value: unknown, agent: unknown = undefined): HaltScope | null {
  if (value !== null && typeof value === "object") {
    const o = value as Record<string, unknown>;
    const name = o["Agent"] ?? o["agent"];
    return { agent: name === undefined || name === null ? null : String(name) };
  }
  if (typeof value === "string") {
    const text = value.trim();
    const low = text.toLowerCase();
    if (low === "tenant") return { agent: null };
    if (low === "agent") return { agent: agent === undefined || agent === null ? "" : String(agent) };
    if (low.startsWith("agent ")) return { agent: text.slice("agent ".length) };
  }
  return null;
}

/** Why a permit may no longer be held. */
export type LostKind =
  /** No keep-alive acknowledged in time: past the belief deadline the cluster may already
   * have expired the session. */
  | "deadline"
  /** A halt covers the permit. It stays held until released; the work should stop. */
  | "halted"
  /** The session expired on the cluster. */
  | "expired"
  /** The session was closed. */
  | "closed"
  /** Another permit of the same ticket (asked again with `ticket`) was released: the
   * ticket is no longer held. */
  | "released";

/** Why a permit may no longer be held: a value to act on, never text to match. */
export interface Lost {
  readonly kind: LostKind;
  /** The halt's scope and reason, for kind "halted". */
  readonly scope?: HaltScope;
  readonly reason?: string;
}

/** A human line for a {@link Lost}. */
export function describeLost(lost: Lost): string {
  switch (lost.kind) {
    case "deadline":
      return "lease deadline passed without a keep-alive";
    case "halted":
      return `halted (${lost.scope?.agent ? `agent ${lost.scope.agent}` : "tenant"}): ${lost.reason ?? ""}`;
    case "expired":
      return "session expired";
    case "closed":
      return "session closed";
    case "released":
      return "released through another permit of its ticket";
  }
}

/** Where a waiting ticket queues: `level` first (higher first), then weighted fair shares
 * across `fairnessKey` values (first come within a key). */
export interface Priority {
  readonly level?: number;
  readonly fairnessKey?: string;
  readonly weight?: number;
}

/** One limit of a request naming several: `units` of `limit`, of its `key` when keyed. */
export interface Part {
  readonly limit: string;
  readonly units?: number;
  readonly key?: string;
}

/** A part as the wire writes it. */
export function partJson(p: Part): Record<string, unknown> {
  const out: Record<string, unknown> = { limit: p.limit, units: p.units ?? 1 };
  if (p.key !== undefined) out["key"] = p.key;
  return out;
}

/** A limit's definition (`defineLimit`, `applyLimits`). */
export interface LimitSpec {
  /** Units held at once (per key when keyed); 0 is no cap. */
  readonly concurrent?: number;
  /** Token refill per second; 0 is no rate. */
  readonly perSecond?: number;
  /** Bucket size (default max(ceil(perSecond), 1)). */
  readonly burst?: number | null;
  /** One bucket or semaphore per key. */
  readonly keyed?: boolean;
  /** Most live keys (implies keyed; the cluster's default is 1000). */
  readonly keysMax?: number | null;
  /** Evaluated and counted, never refuses. */
  readonly shadow?: boolean;
}

/** A spec as the wire writes it. */
export function specJson(s: LimitSpec): Record<string, unknown> {
  const out: Record<string, unknown> = {
    concurrent: s.concurrent ?? 0,
    per_second: s.perSecond ?? 0,
    keyed: s.keyed ?? (s.keysMax !== undefined && s.keysMax !== null),
    shadow: s.shadow ?? false,
  };
  if (s.burst !== undefined) out["burst"] = s.burst;
  if (s.keysMax !== undefined) out["keys_max"] = s.keysMax;
  return out;
}

/** A limit's spec and use (`GET /v1/tenants/{tenant}/limits/{name}`). */
export interface LimitStatus {
  readonly tenant: string;
  readonly name: string;
  readonly concurrent: number;
  readonly per_second: number;
  readonly burst: number;
  readonly in_use: number;
  readonly waiting: number;
  readonly max_in_use: number;
  /** Whole tokens in the bucket at its last refill. */
  readonly tokens: number;
  readonly removing: boolean;
  readonly keys_max: number | null;
  readonly shadow: boolean;
  readonly [more: string]: unknown;
}

/** What `applyLimits` changed (or would, on a dry run). */
export interface LimitsChange {
  readonly created: string[];
  readonly changed: string[];
  readonly removed: string[];
  readonly unchanged: string[];
  readonly applied: boolean;
}

/** A run in the tenant's running set. */
export interface Run {
  readonly run: string;
  readonly agent: string | null;
  readonly admitted_at_wall_ms: number;
  readonly admitted_at_log_ms: number;
}

/** Spend charged to a period. */
export interface Spent {
  readonly tenant: string;
  readonly period: string;
  readonly tokens: number;
  readonly minor_units: number;
  readonly [more: string]: unknown;
}

/** A run settlement's answer: `duplicate` for a retry of the same payload. */
export interface Settlement {
  readonly status: string;
  readonly duplicate?: boolean;
  readonly [more: string]: unknown;
}

/** A held cost's settlement (`permit.settle`). */
export interface CostSettlement {
  /** "settled" (at or below the estimate) or "overrun" (charged above it). */
  readonly status: "settled" | "overrun";
  /** A retry of a settlement already made. */
  readonly duplicate: boolean;
  /** Tokens charged above the estimate (0 when settled). */
  readonly overrunTokens: number;
  /** Tokens that went back to the bucket, told for a permit of one limit (else null). */
  readonly returnedTokens: number | null;
}

/** A tenant's ceilings, budgets, running count and halts (the server's JSON). */
export type TenantStatus = Readonly<Record<string, unknown>>;
