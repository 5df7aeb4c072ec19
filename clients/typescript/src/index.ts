/**
 * Weir's TypeScript client: a table of contents. The client (`client.ts`) reaches the
 * cluster through `transport.ts` (nodes, silence, retries, hedges); sessions and permits
 * keep the belief rule in `session.ts` on the clock of `clock.ts`; token leases, takes decided
 * from a local bucket while that belief holds, are `lease.ts`; `errors.ts` and
 * `types.ts` are the values it hands back; `dispose.ts` is the guarded `Symbol.asyncDispose`.
 */

export { Client, KEEP } from "./client.js";
export type { DefineOptions, ReserveOptions, SessionOptions, SettleOptions, TakeOptions } from "./client.js";
export { CLOCK_NAME, bootClockNs, bootNowMs, deadlineAfterMs, marginForMs } from "./clock.js";
export type { ClientOptions } from "./config.js";
export * from "./errors.js";
export { Lease, LeaseEnded } from "./lease.js";
export type { LeaseFigures, LeaseOptions } from "./lease.js";
export { Permit, PermitLost, Session } from "./session.js";
export type { AcquireOptions } from "./session.js";
export { describeLost } from "./types.js";
export type * from "./types.js";
export { VERSION } from "./version.js";
