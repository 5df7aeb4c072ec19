/**
 * The clock the belief deadline is kept on, and the deadline arithmetic (G2).
 *
 * Which clock. Node's own clocks (`performance.now()`, `process.hrtime`, the timers) read
 * libuv's `uv_hrtime`, which is `CLOCK_MONOTONIC` on Linux: it does not count the time
 * the machine spends suspended. The cluster's clocks, and so the leases, go on during a
 * suspend, so a deadline on that clock alone would let a client that resumes believe in
 * permits whose lease ran out in real time. Node exposes no `CLOCK_BOOTTIME`; Linux shows
 * it in `/proc/uptime` (seconds since boot, suspend included, in hundredths). So
 * {@link bootNowMs} is the monotonic clock plus the time suspended since this module
 * loaded, measured as the growth of `/proc/uptime - monotonic` and credited up to 10 ms
 * long, never short; it never moves backwards: a conservative reading of `CLOCK_BOOTTIME`
 * at the monotonic clock's resolution. Where `/proc/uptime` cannot be read (macOS, Windows) it is the monotonic
 * clock alone ({@link CLOCK_NAME} says which), with the caveat above.
 *
 * Timers only decide when to *look*: every decision compares against {@link bootNowMs},
 * and a wait on the deadline looks again at least every {@link LOOK_EVERY_MS}, so a
 * deadline that passed during a suspend is noticed within that long of resuming.
 *
 * The rules are the Rust library's and the Python client's:
 * - a session sends a keep-alive every TTL/5 ({@link KEEPALIVES_PER_TTL});
 * - the margin is a tenth of the TTL, at least 100 ms ({@link marginForMs});
 * - after a keep-alive (or the open) *sent* at `sent` is acknowledged, the belief deadline
 *   becomes `sent + TTL - margin` ({@link deadlineAfterMs}), and only ever moves later.
 */

import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";

/** Longest a wait on the belief deadline sleeps before it looks at the clock again (ms). */
export const LOOK_EVERY_MS = 250;

/** Keep-alives sent per TTL. */
export const KEEPALIVES_PER_TTL = 5;

/** A growth of `/proc/uptime - monotonic` below this is the reads' own spacing at the
 * calibration (microseconds), not a suspend (ms). */
const SUSPEND_MIN_MS = 1;

/** The longest span of the reads around the tick the calibration takes (ms): longer, a
 * preemption came between them. */
const TICK_SPAN_MAX_MS = 0.2;

/** `/proc/uptime` counts hundredths of a second: its reading may be this much behind. */
const UPTIME_RESOLUTION_MS = 10;

function uptimeMs(): number | null {
  try {
    const text = readFileSync("/proc/uptime", "ascii");
    const seconds = Number.parseFloat(text.split(" ")[0] ?? "");
    return Number.isFinite(seconds) ? seconds * 1000 : null;
  } catch {
    return null;
  }
}

/**
 * A lower bound of `CLOCK_BOOTTIME - monotonic` now (ms): `/proc/uptime` read between two
 * readings of the monotonic clock and set against the later one, so that neither the
 * uptime's truncation nor a preemption between the reads can make it too high. Null
 * without /proc/uptime.
 */
interface OffsetSample {
  offsetMs: number;
  beforeMs: number;
  afterMs: number;
  upMs: number;
}

function offsetSample(): OffsetSample | null {
  const before = performance.now();
  const up = uptimeMs();
  const after = performance.now();
  if (up === null) return null;
  return { offsetMs: up - after, beforeMs: before, afterMs: after, upMs: up };
}

/**
 * `CLOCK_BOOTTIME - monotonic` at load (ms), read as `/proc/uptime` ticks, or null without
 * /proc/uptime. The first value a read shows after a tick is the boot time of the tick
 * itself, which fell between the previous read's start and this read's end: a tick caught
 * within {@link TICK_SPAN_MAX_MS} of both is used (set against the later reading, so the
 * offset is within that span under the truth, never over it); one caught across a longer
 * span (a preemption between the reads) is not, and the next tick is tried, for up to ten
 * hundredths of a second once per process. Otherwise the largest sample, up to a hundredth
 * under the truth.
 */
const baseOffsetMs: number | null = (() => {
  let prev = offsetSample();
  if (prev === null) return null;
  let best = prev.offsetMs;
  const until = performance.now() + 10 * UPTIME_RESOLUTION_MS;
  while (performance.now() < until) {
    const s = offsetSample();
    if (s === null) break;
    best = Math.max(best, s.offsetMs);
    if (s.upMs !== prev.upMs && s.afterMs - prev.beforeMs < TICK_SPAN_MAX_MS) return s.offsetMs;
    prev = s;
  }
  return best;
})();

/** The largest offset sample since load (ms): each is at most the true offset, and the
 * offset only grows (by suspends). */
let seenOffsetMs: number | null = baseOffsetMs;

/** Which clock {@link bootNowMs} reads. */
export const CLOCK_NAME: "CLOCK_BOOTTIME (/proc/uptime)" | "monotonic" =
  baseOffsetMs === null ? "monotonic" : "CLOCK_BOOTTIME (/proc/uptime)";

let lastMs = 0;

/**
 * Milliseconds on the boot clock (module doc): the monotonic clock, plus the time
 * suspended since load where the platform shows it. A suspend is seen as the growth of
 * `/proc/uptime - monotonic` and credited with one hundredth more than the growth read
 * (the uptime's truncation), so it is never credited short by more than the read's own
 * microseconds; without a suspend the reading is the monotonic clock's. Never moves
 * backwards.
 */
export function bootNowMs(): number {
  const mono = performance.now();
  let now = mono;
  if (seenOffsetMs !== null && baseOffsetMs !== null) {
    const sample = offsetSample();
    if (sample !== null && sample.offsetMs > seenOffsetMs) seenOffsetMs = sample.offsetMs;
    const suspended = seenOffsetMs - baseOffsetMs;
    // Under a millisecond is the two reads' own spacing, not a suspend.
    if (suspended > SUSPEND_MIN_MS) now = mono + suspended + UPTIME_RESOLUTION_MS;
  }
  if (now < lastMs) now = lastMs;
  lastMs = now;
  return now;
}

/**
 * The reading `ms` of {@link bootNowMs} on `CLOCK_BOOTTIME` itself (ns since boot), for
 * records that other processes compare with theirs (the partition harness's history).
 * Null without `/proc/uptime`.
 */
export function bootClockNs(ms: number = bootNowMs()): number | null {
  return baseOffsetMs === null ? null : Math.round((ms + baseOffsetMs) * 1e6);
}

/**
 * The safety margin subtracted from the TTL (ms): a tenth of the TTL, at least 100 ms. It
 * covers a clock-rate drift between this client and the leaders far larger than
 * NTP-disciplined clocks show.
 */
export function marginForMs(ttlMs: number): number {
  return Math.max(ttlMs / 10, 100);
}

/**
 * The belief deadline after a keep-alive (or open) sent at `sentMs` (on
 * {@link bootNowMs}) was acknowledged: the cluster cannot expire the session before
 * `sentMs + ttlMs`, less the margin.
 */
export function deadlineAfterMs(sentMs: number, ttlMs: number): number {
  return sentMs + ttlMs - marginForMs(ttlMs);
}
